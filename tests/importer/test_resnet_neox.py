"""`costspec import hf` for the families that need the dataflow: resnet (projection
shortcuts), gpt_neox and phi (parallel residuals, partial rotary). Each import is checked with
`validate --against` its transformers class built on `meta` from the same config.json (forward and
train: exact matmul FLOPs and parameters, every pointwise kind through named rules only). Each check
builds and counts a real model: the ones over 2 s are marked slow."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from costspec.against.check import summary, validate_against  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.importer import import_hf  # noqa: E402
from costspec.importer.config import ImportProblem  # noqa: E402
from costspec.model import load, loads  # noqa: E402
from tests.common import ROOT  # noqa: E402


def check_import(config, tmp_path, sets: dict | None = None, dims: dict | None = None):
    """Import config (a transformers config object) via its config.json, validate the spec against
    the transformers class the family names, forward and train; returns the spec text and the
    per-pass totals."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config.to_dict()))
    imported = import_hf(path)
    model = loads(imported.text)
    values = model.bind(sets=dims)
    totals = {}
    for pass_ in ("forward", "train"):
        real = load_target(f"hf:{imported.family.hf_class}", model, values, "meta", str(path), sets or {})
        result = validate_against(model, values, real, pass_)
        assert result.ok, "\n".join(result.failures())
        assert not result.rowmap.unmatched_real, result.rowmap.unmatched_real
        for phase, total in summary(result).items():
            # matmul FLOPs (after the named rules) and parameters agree exactly
            assert total["real_reconciled"] == total["spec_matmul"], (pass_, phase, total)
            assert total["real_params"] == total["spec_params"], (pass_, phase, total)
            totals[phase] = total
    return imported.text, totals


# ----------------------------------------------------------------------------------------------
# ResNet
# ----------------------------------------------------------------------------------------------
def resnet_config(**kw):
    base = dict(embedding_size=8, hidden_sizes=[16, 32], depths=[2, 1], layer_type="bottleneck")
    return transformers.ResNetConfig(**{**base, **kw})


@pytest.mark.slow
def test_resnet_bottleneck_import_matches_resnetmodel(tmp_path):
    text, totals = check_import(resnet_config(), tmp_path, dims={"img": 64})
    assert "shortcut:" in text and "repeat: D1 - 1" in text
    assert "repeat: D2" not in text  # a stage of one block has no identity blocks
    # forward matmul, B=1, img 64: stem 7x7/2 3->8 on 32x32 = 2*32*32*8*3*49; then 16x16 after the pool;
    # stage 1 (stride 1, width 4): first block 8->4 (1x1), 4->4 (3x3), 4->16 (1x1), shortcut 8->16;
    # identity block 16->4, 4->4 (3x3), 4->16; stage 2 (stride 2, width 8, 8x8): 16->8 at 16x16, 8->8 3x3
    # at 8x8, 8->32, shortcut 16->32 at 8x8
    hw1, hw2 = 16 * 16, 8 * 8
    stem = 2 * 32 * 32 * 8 * 3 * 49
    stage1 = 2 * hw1 * (8 * 4 + 4 * 4 * 9 + 4 * 16 + 8 * 16) + 2 * hw1 * (16 * 4 + 4 * 4 * 9 + 4 * 16)
    stage2 = 2 * hw1 * 16 * 8 + 2 * hw2 * (8 * 8 * 9 + 8 * 32 + 16 * 32)
    assert totals["forward"]["spec_matmul"] == stem + stage1 + stage2


@pytest.mark.slow
def test_resnet_basic_and_downsampling_options(tmp_path):
    # resnet-18 style: basic blocks, stage 1 keeps the stem's channels (an identity first block),
    # downsample_in_first_stage puts a stride (and so a projection) on stage 1 instead
    text, _ = check_import(resnet_config(layer_type="basic", hidden_sizes=[8, 16], depths=[2, 2],
                                         hidden_act="gelu"), tmp_path, dims={"img": 32})
    assert "repeat: D1\n" in text and "fn: gelu" in text
    text, _ = check_import(resnet_config(downsample_in_first_stage=True, downsample_in_bottleneck=True,
                                         hidden_sizes=[8, 16]), tmp_path, dims={"img": 48})
    assert "args: {out: C1, stride: 2}" in text


def test_resnet_refuses_mismatched_stage_lists(tmp_path):
    path = tmp_path / "config.json"
    data = resnet_config().to_dict()
    data["depths"] = [1, 2, 3]
    path.write_text(json.dumps(data))
    with pytest.raises(ImportProblem, match="depths has 3 stages but hidden_sizes has 2"):
        import_hf(path)


# ----------------------------------------------------------------------------------------------
# GPT-NeoX and Phi (an entry of the decoder template)
# ----------------------------------------------------------------------------------------------
def neox_config(**kw):
    base = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                vocab_size=500, max_position_embeddings=32, rotary_pct=0.25)
    return transformers.GPTNeoXConfig(**{**base, **kw})


def phi_config(**kw):
    base = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                vocab_size=500, max_position_embeddings=32, partial_rotary_factor=0.5)
    return transformers.PhiConfig(**{**base, **kw})


@pytest.mark.slow
def test_gpt_neox_parallel_import_matches_gptneoxmodel(tmp_path):
    text, totals = check_import(neox_config(), tmp_path)
    assert "- parallel:" in text and "rope_dims: R" in text
    B, S, C, F, L, h, V = 1, 32, 64, 256, 2, 4, 500
    # per layer: qkv 2*S*C*3C, dense 2*S*C*C, QK^T and AV 2 * 2*S*S*C (causal counted as executed), MLP 2 * 2*S*C*F
    per_layer = 2 * B * S * C * 3 * C + 2 * B * S * C * C + 2 * 2 * B * h * S * S * (C // h) + 2 * 2 * B * S * C * F
    assert totals["forward"]["spec_matmul"] == L * per_layer + 2 * B * S * C * V  # GPTNeoXForCausalLM's untied head


def test_gpt_neox_sequential_full_rotary_no_bias(tmp_path):
    text, _ = check_import(neox_config(use_parallel_residual=False, rotary_pct=1.0, attention_bias=False,
                                       hidden_act="gelu_pytorch_tanh"), tmp_path)
    assert "- parallel:" not in text and "rope_dims" not in text and "qkv_bias: false" in text


@pytest.mark.slow
def test_phi_import_matches_phimodel(tmp_path):
    # Phi's hidden_act gelu_new is the tanh GELU (imported as gelu_tanh); transformers runs it as 8
    # python-level ops, so the real model is built with the same function as one op
    text, _ = check_import(phi_config(), tmp_path, sets={"hidden_act": "gelu_pytorch_tanh"})
    assert "fn: gelu_tanh" in text and "gelu_new" in text
    text, _ = check_import(phi_config(num_key_value_heads=2, hidden_act="gelu"), tmp_path)
    assert "kv_heads: KV" in text


def test_phi_qk_layernorm_is_the_attention_ops_biased_qk_norm(tmp_path):
    """qk_layernorm: one LayerNorm (weight and bias) over each head's dims of q and of k, shared by the heads."""
    text, totals = check_import(phi_config(qk_layernorm=True, hidden_act="gelu"), tmp_path)
    assert "qk_norm: layernorm, qk_norm_bias: true" in text
    plain = loads(import_hf(write_phi(tmp_path, phi_config(hidden_act="gelu"))).text)
    head_dim = 64 // 4
    assert totals["forward"]["spec_params"] == plain.report("forward", plain.bind()).params + 2 * 2 * 2 * head_dim


def write_phi(tmp_path, config):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config.to_dict()))
    return path


def test_phi_refuses_odd_rotary_dims(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(phi_config(partial_rotary_factor=0.3).to_dict()))  # int(16 * 0.3) = 4: fine
    assert "R: {value: 4" in import_hf(path).text
    path.write_text(json.dumps(phi_config(partial_rotary_factor=0.2).to_dict()))  # int(16 * 0.2) = 3
    with pytest.raises(ImportProblem, match="= 3 rotary dims; expected an even number"):
        import_hf(path)


# ----------------------------------------------------------------------------------------------
# Random valid configs (few examples each: every one builds and counts a real model)
# ----------------------------------------------------------------------------------------------
PROPERTY = settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def resnet_configs(draw):
    n = draw(st.integers(1, 3))
    bottleneck = draw(st.booleans())
    sizes = [draw(st.sampled_from([4, 8, 12, 16] if bottleneck else [2, 4, 6, 8])) for _ in range(n)]
    return resnet_config(
        embedding_size=draw(st.sampled_from([4, 8])), hidden_sizes=sizes,
        depths=[draw(st.integers(1, 3)) for _ in range(n)], layer_type="bottleneck" if bottleneck else "basic",
        downsample_in_first_stage=draw(st.booleans()), downsample_in_bottleneck=draw(st.booleans()),
        hidden_act=draw(st.sampled_from(["relu", "gelu", "silu"]))), draw(st.sampled_from([32, 40, 57]))


@pytest.mark.slow
@PROPERTY
@given(drawn=resnet_configs())
def test_random_resnet_configs_import_exactly(drawn, tmp_path):
    config, img = drawn
    check_import(config, tmp_path, dims={"img": img})


@st.composite
def decoder_shapes(draw):
    heads = draw(st.sampled_from([1, 2, 4]))
    head_dim = draw(st.sampled_from([8, 16]))
    return dict(hidden_size=heads * head_dim, num_attention_heads=heads, num_hidden_layers=draw(st.integers(1, 3)),
                intermediate_size=draw(st.sampled_from([16, 48, 64])), vocab_size=draw(st.integers(10, 300)),
                max_position_embeddings=draw(st.sampled_from([8, 17, 32]))), head_dim


@pytest.mark.slow
@PROPERTY
@given(drawn=decoder_shapes(), pct=st.sampled_from([0.25, 0.5, 1.0]), parallel=st.booleans(),
       bias=st.booleans(), act=st.sampled_from(["gelu", "relu", "gelu_pytorch_tanh"]))
def test_random_gpt_neox_configs_import_exactly(drawn, pct, parallel, bias, act, tmp_path):
    shape, _ = drawn
    check_import(neox_config(**shape, rotary_pct=pct, use_parallel_residual=parallel, attention_bias=bias,
                             hidden_act=act), tmp_path)


@pytest.mark.slow
@PROPERTY
@given(drawn=decoder_shapes(), pct=st.sampled_from([0.25, 0.5, 1.0]), data=st.data())
def test_random_phi_configs_import_exactly(drawn, pct, data, tmp_path):
    shape, _ = drawn
    heads = shape["num_attention_heads"]
    kv = data.draw(st.sampled_from([k for k in (1, 2, 4) if heads % k == 0]))
    check_import(phi_config(**shape, partial_rotary_factor=pct, num_key_value_heads=kv, hidden_act="gelu"),
                 tmp_path)


# ----------------------------------------------------------------------------------------------
# Published configs (tests/data/hf_configs_flow: the model repositories' config.json, label maps left
# out): the zoo round trip, and Phi-2 against PhiModel at its full size
# ----------------------------------------------------------------------------------------------
CONFIGS = ROOT / "tests/data/hf_configs_flow"


@pytest.mark.parametrize("name", [pytest.param("resnet50", marks=pytest.mark.slow), "pythia_160m"])
def test_import_reproduces_the_zoo_spec(name):
    # the zoo specs are the backbones (ResNetModel, GPTNeoXModel): pythia with --backbone
    imported = loads(import_hf(CONFIGS / f"{name}.json", backbone=name == "pythia_160m").text)
    zoo = load(ROOT / f"specs/{name}.yaml")
    assert imported.precision.dtype == zoo.precision.dtype
    for pass_ in ("forward", "train"):
        for batch in (1, 8):
            a, b = imported.report(pass_, imported.bind(batch)), zoo.report(pass_, zoo.bind(batch))
            assert (a.tc, a.cuda, a.params) == (b.tc, b.cuda, b.params), (pass_, batch)


@pytest.mark.slow
def test_phi_2_config_matches_phimodel(tmp_path):
    data = json.loads((CONFIGS / "phi_2.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    imported = import_hf(path, backbone=True)
    assert "R: {value: 32" in imported.text  # int(80 * 0.4)
    model = loads(imported.text)
    values = model.bind(sets={"S": 256, "L": 2})  # the full width, 2 of 32 layers, 256 tokens
    for pass_ in ("forward", "train"):
        real = load_target("hf:PhiModel", model, values, "meta", str(path),
                           {"hidden_act": "gelu_pytorch_tanh", "num_hidden_layers": "2"})
        result = validate_against(model, values, real, pass_)
        assert result.ok, "\n".join(result.failures())
