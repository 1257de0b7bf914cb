"""Causal LMs import whole (LM head included, tied or not, as transformers runs it); `--backbone` drops the head
(the spec then describes the `*Model` class, and its header's check command names it). Every decoder family,
and the Llama-3.1-8B-shaped acceptance: `eval --batch 1 --set S=512` equals LlamaForCausalLM on meta under
FlopCounterMode, and its 8,030,261,248 parameters."""
from __future__ import annotations

import json

import pytest

from costspec.importer import FAMILIES, import_hf
from costspec.importer.head import inferred
from costspec.model import loads
from tests.common import ROOT, run_cli

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.importer.check import assert_exact, import_and_check_file  # noqa: E402

LLAMA_8B = ROOT / "tests/data/hf_configs_flow/llama_3_1_8b.json"
CAUSAL = sorted(t for t, f in FAMILIES.items() if (f.lm or inferred(f.hf_class)) is not None)
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")
# defaults the importer cannot take as they are (None where transformers needs a value); DeepSeek-V3 keeps its
# first_k_dense_replace 3: every layer of the 2 dense, its MoE keys read and checked all the same
NEEDED = {"deepseek_v2": {"num_experts_per_tok": 2}, "ministral": {"head_dim": 128}}


def small_default(model_type: str, folder):
    """The config class's defaults with 2 layers (full widths: imported and evaluated, never built)."""
    data = transformers.AutoConfig.for_model(model_type).to_dict()
    for key in LAYER_KEYS:
        if key in data:
            data[key] = 2
    for key in ("layer_types", "mlp_only_layers", "no_rope_layers"):
        data.pop(key, None)
    data.update(NEEDED.get(model_type, {}), dtype="bfloat16")  # bf16: the matmuls on Tensor Cores
    path = folder / f"{model_type}.json"
    path.write_text(json.dumps(data, default=str))
    return path


@pytest.mark.parametrize("model_type", CAUSAL)
def test_every_causal_lm_imports_whole_and_as_its_backbone(tmp_path, model_type):
    path = small_default(model_type, tmp_path)
    lm = FAMILIES[model_type].lm or inferred(FAMILIES[model_type].hf_class)
    whole, backbone = import_hf(path), import_hf(path, backbone=True)
    assert whole.described == lm.whole and backbone.described == lm.backbone
    assert f"--against hf:{lm.whole} " in whole.text and f"--against hf:{lm.backbone} " in backbone.text
    assert "lm_head" not in backbone.text.split("\nlayers:\n")[1]
    assert f"    source: {lm.head}" in whole.text
    a, b = loads(whole.text), loads(backbone.text)
    values_a, values_b = a.bind(), b.bind()
    ra, rb = a.report("forward", values_a), b.report("forward", values_b)
    C, V = (int(values_a[a.dims.symbols[n]]) for n in ("C", "V"))
    S = int(values_a[a.dims.symbols["S"]])
    tied = "lm_head: {vocab: V, tied: true" in whole.text
    bias = "bias: true" in whole.text.split("  - lm_head: ")[1].split("\n")[0]
    # the head: C*V parameters unless tied (+ V for a bias: Phi, GPT-J), 2*S*C*V FLOPs
    assert ra.params - rb.params == (0 if tied else C * V) + (V if bias else 0)
    assert ra.tc - rb.tc == 2 * S * C * V


@pytest.mark.parametrize("model_type, sets", [
    ("llama", dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                   num_hidden_layers=2, vocab_size=100, max_position_embeddings=32)),
    ("gemma2", dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    num_hidden_layers=2, vocab_size=100, max_position_embeddings=32, sliding_window=16)),
])
def test_backbone_and_whole_match_their_transformers_classes(tmp_path, model_type, sets):
    """llama writes its backbone (the head is added), gemma2 its whole causal LM (the head and the final soft-cap
    are cut): both ways agree with transformers, forward and train."""
    data = transformers.AutoConfig.for_model(model_type, **sets).to_dict()
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data, default=str))
    assert_exact(import_and_check_file(path, passes=("forward",)))
    assert_exact(import_and_check_file(path, backbone=True))


def test_backbone_of_a_model_without_a_head_is_a_usage_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(transformers.BertConfig(num_hidden_layers=1).to_dict()))
    result = run_cli("import", "hf", str(path), "--backbone")
    assert result.returncode == 2 and "--backbone: the bert importer writes BertModel" in result.stderr


def _counted(config: transformers.LlamaConfig, S: int) -> tuple[int, int]:
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    with FlopCounterMode(display=False) as counter:
        model(input_ids=torch.zeros(1, S, dtype=torch.long, device="meta"))
    return counter.get_total_flops(), sum(p.numel() for p in model.parameters())


def _eval(path, tmp_path, S: int, layers: int | None = None) -> dict:
    spec = tmp_path / "llama.yaml"
    assert run_cli("import", "hf", str(path), "-o", str(spec)).returncode == 0
    sets = ["--set", f"S={S}"] + (["--set", f"L={layers}"] if layers else [])
    result = run_cli("eval", str(spec), "--batch", "1", *sets, "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["totals"]


def _llama_8b(**changes) -> transformers.LlamaConfig:
    data = json.loads(LLAMA_8B.read_text())
    data.pop("architectures")
    return transformers.LlamaConfig(**{**data, **changes})


def test_llama_3_1_8b_shape_with_two_layers_equals_llamaforcausallm(tmp_path):
    """The published Llama-3.1-8B config (llama3 RoPE, untied head, bf16) at 2 of its 32 layers."""
    flops, params = _counted(_llama_8b(num_hidden_layers=2), 512)
    totals = _eval(LLAMA_8B, tmp_path, 512, layers=2)
    assert totals["tc_flops"] == flops == 2 * 512 * (2 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
                                                     + 4096 * 128256) + 2 * 2 * 2 * 512 * 512 * 4096
    assert totals["params"] == params


@pytest.mark.slow
def test_llama_3_1_8b_equals_llamaforcausallm_with_its_lm_head(tmp_path):
    flops, params = _counted(_llama_8b(), 512)
    totals = _eval(LLAMA_8B, tmp_path, 512)
    assert totals["tc_flops"] == flops == 7_822_209_187_840
    assert totals["params"] == params == 8_030_261_248


@pytest.mark.parametrize("model_type", ["qwen3", "gpt2"])
def test_a_family_that_declares_no_classes_gets_them_from_its_class_name(tmp_path, monkeypatch, model_type):
    """A `*ForCausalLM` / `*LMHeadModel` family without `lm`: --backbone names `*Model` and reads the backbone's
    attribute (model, transformer) from the spec's top-level sources: the same spec as the declared one."""
    import dataclasses

    path = small_default(model_type, tmp_path)
    declared = import_hf(path, backbone=True)
    monkeypatch.setitem(FAMILIES, model_type, dataclasses.replace(FAMILIES[model_type], lm=None))
    found = import_hf(path, backbone=True)
    assert found.described == declared.described == FAMILIES[model_type].hf_class.replace(
        "ForCausalLM", "Model").replace("LMHeadModel", "Model")
    assert found.text == declared.text


@pytest.mark.parametrize("model_type, sets", [
    ("opt", dict(hidden_size=32, ffn_dim=64, num_attention_heads=4, num_hidden_layers=2, vocab_size=50,
                 max_position_embeddings=16, word_embed_proj_dim=32)),
    ("mamba", dict(hidden_size=32, state_size=4, num_hidden_layers=2, vocab_size=50, intermediate_size=64,
                   time_step_rank=4)),
])
def test_an_inferred_backbone_matches_its_model_class(tmp_path, model_type, sets):
    """OPT (model.decoder) and Mamba (backbone) declare no CausalLM: --backbone finds OPTModel / MambaModel."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(transformers.AutoConfig.for_model(model_type, **sets).to_dict(), default=str))
    assert_exact(import_and_check_file(path, passes=("forward",), backbone=True))
