"""`costspec validate --against`: a spec checked against a real model, not against its own module.

The real models are small torch modules (tests/against_models.py) and, for the zoo, transformers
classes built from their configs on `meta` (slow: marked so).
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT, run_cli  # noqa: E402

from costspec.against.check import summary, validate_against  # noqa: E402
from costspec.against.mapping import compact  # noqa: E402
from costspec.against.report import to_result  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.core.errors import UsageError  # noqa: E402
from costspec.core.render import render  # noqa: E402
from costspec.model import load, loads  # noqa: E402
from costspec.runtime.validate import validate  # noqa: E402


def against(spec, target: str, pass_: str = "forward", sets: dict | None = None):
    model = loads(spec) if isinstance(spec, str) and "\n" in spec else load(spec)
    values = model.bind()
    real = load_target(target, model, values, "meta", None, sets or {})
    return model, validate_against(model, values, real, pass_)


def failures_text(result) -> str:
    return "\n".join(result.failures())


# ----------------------------------------------------------------------------------------------
# The toy MLP against a plain torch module
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_toy_mlp_matches_its_plain_torch_module(pass_):
    model, result = against(ROOT / "specs/toy_mlp.yaml", "against_models:toy_mlp", pass_)
    assert result.ok, failures_text(result)
    M, D, N = 128, 1024, 10
    fwd = result.phases["forward"].rows[-1]
    assert fwd.real_matmul == fwd.spec_matmul == N * 2 * M * D * D  # 10 GEMMs of (128 x 1024) @ (1024 x 1024)
    assert fwd.real_params == N * (D * D + D)  # 10,496,000
    assert fwd.real_pointwise == {"bias_add": N * M * D, "sigmoid": N * M * D}
    # the repeat was matched automatically (no source: in the spec) to the ModuleList, its fc by parameters
    assert result.rowmap.matches["layers"].paths == [f"layers.{i}" for i in range(N)]
    assert result.rowmap.matches["layers.fc"].how == "auto"
    if pass_ == "train":
        bwd = result.phases["backward"].rows[-1]
        # dW for all 10 layers, dX for the 9 whose input needs a gradient (the first one's is the input)
        assert bwd.real_matmul == (N + N - 1) * 2 * M * D * D


def test_callable_may_return_its_own_inputs():
    _, result = against(ROOT / "specs/toy_mlp.yaml", "against_models:toy_mlp_with_inputs")
    assert result.ok, failures_text(result)
    assert any("example inputs" in line for line in result.described)


# ----------------------------------------------------------------------------------------------
# Deliberately wrong specs: PASS plain validate, FAIL --against, naming the layer and the kind
# ----------------------------------------------------------------------------------------------
BN_AS_LN2D = """
costspec: 1
name: bn_written_as_ln2d
dims: {B: 2, C: 16, H: 8}
precision: {dtype: fp32}
input: [B, 3, H, H]
layers:
  - conv2d: {out: C, kernel: 3, padding: 1, bias: false}
    name: conv
  - layernorm2d: {}  # the real model has BatchNorm2d(C): the same 2*C parameters, other work
    name: norm
  - activation: {fn: relu}
    name: act
"""

SHORTCUT_AS_GROUPED_CONV = """
costspec: 1
name: shortcut_as_grouped_conv
dims: {B: 2, H: 8}
precision: {dtype: fp32}
input: [B, 8, H, H]
layers:
  - sequence:
      - conv2d: {out: 16, kernel: 3, padding: 1, bias: false}
        name: conv
      # imitates the 8 -> 16 projection shortcut: 16*16/2 = 8*16 parameters and the same FLOPs, but on
      # the main path, so the residual add is missing
      - conv2d: {out: 16, kernel: 1, groups: 2, bias: false}
        name: proj
    name: block
"""

NO_LAYER_SCALE = """
costspec: 1
name: layer_scale_left_out
dims: {B: 2, S: 16, C: 32, L: 2}
precision: {dtype: fp32}
input: [B, S, C]
layers:
  - repeat: L
    name: blocks
    body:
      - residual:
          - layernorm: {}
            name: norm
          - mlp: {hidden: 4*C, fn: gelu}
            name: mlp
"""


@pytest.mark.parametrize("spec, target, row, kinds", [
    (BN_AS_LN2D, "against_models:conv_bn", "norm",
     {"layernorm", "batchnorm_eval"}),  # the real BatchNorm2d (eval mode) counted by its own kind
    (SHORTCUT_AS_GROUPED_CONV, "against_models:projection_shortcut", "block", {"add"}),
    (NO_LAYER_SCALE, "against_models:layer_scale", "blocks", {"params", "mul"}),
], ids=["batchnorm-as-layernorm2d", "shortcut-as-grouped-conv", "layer-scale-left-out"])
@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_wrong_structure_passes_validate_but_fails_against(spec, target, row, kinds, pass_):
    model = loads(spec)
    assert validate(model, model.bind(), pass_).ok  # self-consistent: plain validate cannot see it
    _, result = against(spec, target, pass_)
    assert not result.ok
    forward = result.phases["forward"].failures
    assert {kind for r, kind, _, _ in forward if r == row} >= kinds, forward
    text = failures_text(result)
    assert f"forward: {row}: " in text


def test_layer_scale_difference_has_its_numbers():
    _, result = against(NO_LAYER_SCALE, "against_models:layer_scale")
    got = {(r, kind): (a, b) for r, kind, a, b in result.phases["forward"].failures}
    B, S, C, L = 2, 16, 32, 2
    assert got[("blocks", "mul")] == (0, L * B * S * C)  # gamma * mlp(x): one multiply per element
    spec_params = L * (2 * C + C * 4 * C + 4 * C + 4 * C * C + C)  # norm + fc1 + fc2 per block
    assert got[("blocks", "params")] == (spec_params, spec_params + L * C)  # + gamma (C) per block


def test_parallel_residual_is_invisible_to_counting():
    """Two sequential residuals and one parallel residual run the same kinds and counts (docs say so)."""
    spec = """
costspec: 1
name: sequential_for_parallel
dims: {B: 2, S: 16, C: 32}
precision: {dtype: fp32}
input: [B, S, C]
layers:
  - linear: {out: C}
    name: inp
  - residual:
      - layernorm: {}
        name: norm1
      - mlp: {hidden: 4*C, fn: gelu}
        name: mlp1
  - residual:
      - layernorm: {}
        name: norm2
      - mlp: {hidden: 4*C, fn: gelu}
        name: mlp2
"""
    for pass_ in ("forward", "train"):
        _, result = against(spec, "against_models:parallel_residual", pass_)
        assert result.ok, failures_text(result)


# ----------------------------------------------------------------------------------------------
# Mapping, sources, ignore entries, errors
# ----------------------------------------------------------------------------------------------
def test_compact_paths():
    assert compact([f"layers.{i}.attn" for i in range(12)]) == "layers.{0..11}.attn"
    assert compact(["h.2", "h.5"]) == "h.{2,5}"
    assert compact([""]) == "(model)"
    assert compact([]) == "-"


def test_source_that_the_real_model_lacks_is_a_usage_error():
    spec = BN_AS_LN2D.replace("    name: norm\n", "    name: norm\n    source: bn\n")
    with pytest.raises(UsageError, match="source 'bn', which the real model does not have"):
        against(spec, "against_models:conv_bn")


def test_unmatched_real_modules_and_rows_are_listed():
    spec = BN_AS_LN2D.replace("  - conv2d: {out: C, kernel: 3, padding: 1, bias: false}\n    name: conv\n",
                              "  - conv2d: {out: C, kernel: 3, padding: 1, bias: false}\n    name: conv\n"
                              "    source: act\n")  # a wrong source: the conv's module stays unclaimed
    _, result = against(spec, "against_models:conv_bn")
    assert "conv" in result.rowmap.unmatched_real
    assert "act" in result.rowmap.unmatched_rows


def test_ignore_leaves_a_module_out_with_its_numbers():
    spec = BN_AS_LN2D.replace("layers:\n", "ignore:\n  - {module: norm, reason: compared elsewhere}\nlayers:\n", 1)
    norm = BN_AS_LN2D[BN_AS_LN2D.index("  - layernorm2d"):BN_AS_LN2D.index("  - activation")]
    spec = spec.replace(norm, "")
    _, result = against(spec, "against_models:conv_bn")
    assert result.ok, failures_text(result)
    (entry,) = result.ignored
    assert entry.paths == ["norm"] and entry.params == 2 * 16  # BatchNorm2d(16): weight + bias
    assert entry.pointwise["forward"] == {"batchnorm_eval": 2 * 16 * 8 * 8}
    text = render(to_result(result))
    assert "compared elsewhere" in text and "result: PASS" in text


def test_ignore_that_matches_nothing_is_a_problem():
    spec = BN_AS_LN2D.replace("layers:\n", "ignore:\n  - {module: pooler, reason: not there}\nlayers:\n", 1)
    _, result = against(spec, "against_models:conv_bn")
    assert "ignore: pooler matches no module of the real model" in result.problems


@pytest.mark.parametrize("target, message", [
    ("no_colon", "expected package.module:callable"),
    ("against_models:missing", "has no attribute"),
    ("against_models:not_a_module", "expected an nn.Module"),
    ("no_such_module_xyz:f", "cannot import"),
])
def test_bad_targets_are_usage_errors(target, message):
    model = load(ROOT / "specs/toy_mlp.yaml")
    with pytest.raises(UsageError, match=message):
        load_target(target, model, model.bind(), "meta")


def test_config_needs_an_hf_target():
    model = load(ROOT / "specs/toy_mlp.yaml")
    with pytest.raises(UsageError, match="configure hf:ModelClass"):
        load_target("against_models:toy_mlp", model, model.bind(), "meta", None, {"hidden_size": "8"})


@pytest.mark.slow
def test_cli_against_exit_codes(tmp_path):
    (tmp_path / "my_models.py").write_text((ROOT / "tests/against_models.py").read_text())
    spec = tmp_path / "bn.yaml"
    spec.write_text(BN_AS_LN2D)
    plain = run_cli("validate", spec, cwd=tmp_path)
    assert plain.returncode == 0 and "checked against: the torch module costspec generates" in plain.stdout
    wrong = run_cli("validate", spec, "--against", "my_models:conv_bn", cwd=tmp_path)
    assert wrong.returncode == 1, wrong.stderr
    assert "FAIL: forward: norm: layernorm" in wrong.stdout
    good = run_cli("validate", ROOT / "specs/toy_mlp.yaml", "--against", "my_models:toy_mlp", "--pass", "train",
                   "--format", "json", cwd=tmp_path)
    assert good.returncode == 0, good.stderr
    assert '"checked_against": "the real model"' in good.stdout
    usage = run_cli("validate", spec, "--config-set", "a=1", cwd=tmp_path)
    assert usage.returncode == 2 and "need --against" in usage.stderr


# ----------------------------------------------------------------------------------------------
# The zoo against transformers, built from configs on meta
# ----------------------------------------------------------------------------------------------
ZOO = {
    "vit_b": ("hf:ViTModel", {"add_pooling_layer": "false"}),
    "vit_l": ("hf:ViTModel", {"add_pooling_layer": "false", "hidden_size": "1024", "num_hidden_layers": "24",
                              "num_attention_heads": "16", "intermediate_size": "4096"}),
    "vit_h": ("hf:ViTModel", {"add_pooling_layer": "false", "hidden_size": "1280", "num_hidden_layers": "32",
                              "num_attention_heads": "16", "intermediate_size": "5120", "patch_size": "14"}),
    "clip_vit_l14": ("hf:CLIPVisionModelWithProjection", {
        "hidden_size": "1024", "intermediate_size": "4096", "num_hidden_layers": "24", "num_attention_heads": "16",
        "patch_size": "14", "projection_dim": "768", "image_size": "224"}),
    "sam_vit_b": ("hf:SamVisionModel", {}),
    "bert_base": ("hf:BertModel", {"add_pooling_layer": "false"}),
    "gpt2_small": ("hf:GPT2LMHeadModel", {"activation_function": "gelu_pytorch_tanh"}),
    "llama_1b": ("hf:LlamaModel", {"hidden_size": "2048", "intermediate_size": "5632", "num_hidden_layers": "16",
                                   "num_attention_heads": "32", "num_key_value_heads": "8", "vocab_size": "32000",
                                   "max_position_embeddings": "2048"}),
}


@pytest.mark.slow
@pytest.mark.parametrize("pass_", ["forward", "train"])
@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_spec_matches_its_transformers_model(name, pass_):
    pytest.importorskip("transformers")
    target, sets = ZOO[name]
    model, result = against(ROOT / f"specs/{name}.yaml", target, pass_, sets)
    assert result.ok, failures_text(result)
    totals = summary(result)
    for phase in totals.values():  # matmul FLOPs (after the named rules) and parameters agree exactly
        assert phase["real_reconciled"] == phase["spec_matmul"] and phase["real_params"] == phase["spec_params"]
    # every layer with parameters found its real module (by source: or automatically)
    assert not result.rowmap.unmatched_real
    report = render(to_result(result))
    assert "result: PASS" in report


@pytest.mark.slow
@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_deepencoder_matches_its_transformers_parts(pass_):
    """DeepEncoder has no transformers class: tests/against_models.py wires SamVisionEncoder, the two
    compressor convs and CLIP's embeddings and encoder as deepencoder.py does."""
    pytest.importorskip("transformers")
    _, result = against(ROOT / "specs/deepencoder.yaml", "against_models:deepencoder", pass_)
    assert result.ok, failures_text(result)
    (unused,) = [e for e in result.ignored if e.pattern == "embeddings.patch_embedding"]
    assert unused.params == 1024 * 3 * 14 * 14  # CLIP's patch conv (no bias), built but never run
    assert unused.matmul.get("forward", 0) == 0


@pytest.mark.slow
def test_gpt2_default_activation_is_reported_by_name():
    """HF's default gelu_new runs the tanh GELU as python-level ops: --against names each kind."""
    pytest.importorskip("transformers")
    _, result = against(ROOT / "specs/gpt2_small.yaml", "hf:GPT2LMHeadModel")
    kinds = {kind for row, kind, _, _ in result.phases["forward"].failures if row == "h.mlp"}
    assert {"gelu_tanh", "tanh", "unknown:aten.pow"} <= kinds


@pytest.mark.slow
def test_hf_config_file(tmp_path):
    """--config config.json: a local Hugging Face config file (here ViT-B's), read without network."""
    pytest.importorskip("transformers")
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "vit", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, '
                      '"intermediate_size": 3072, "image_size": 224, "patch_size": 16}')
    model = load(ROOT / "specs/vit_b.yaml")
    values = model.bind()
    real = load_target("hf:ViTModel", model, values, "meta", str(config), {"add_pooling_layer": "false"})
    assert validate_against(model, values, real).ok
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UsageError, match="bad.json: not valid JSON: .* line 1 column"):
        load_target("hf:ViTModel", model, values, "meta", str(bad))


@pytest.mark.slow
def test_hf_config_errors():
    pytest.importorskip("transformers")
    model = load(ROOT / "specs/vit_b.yaml")
    with pytest.raises(UsageError, match="has no key 'no_such_key'"):
        load_target("hf:ViTModel", model, model.bind(), "meta", None, {"no_such_key": "1"})
    with pytest.raises(UsageError, match="no model class"):
        load_target("hf:NoSuchModel", model, model.bind(), "meta")
