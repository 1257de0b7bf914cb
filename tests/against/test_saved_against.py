"""`validate --against --saved-bytes`: the bytes the real transformers model keeps for backward (saved_tensors_hooks
on meta, in the spec's dtype) against the spec's, per matched row and in total, every difference a named rule
whose bytes are checked here against the dims. Two layers, short sequences."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from costspec.against import saved as saved_module  # noqa: E402
from costspec.against.check import validate_against  # noqa: E402
from costspec.against.saved import compare_saved_against  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.core.errors import SpecError  # noqa: E402
from costspec.model import load  # noqa: E402
from tests.common import ROOT, invoke  # noqa: E402

CONFIGS = ROOT / "tests/data/hf_configs"
SMALL_VIT = {"image_size": "32", "hidden_size": "64", "num_attention_heads": "2", "intermediate_size": "256"}
CASES = {  # spec -> (target, config file, config sets, dims)
    "vit_b": ("hf:ViTModel", None, {"add_pooling_layer": "false", "num_hidden_layers": "2"}, {"L": 2, "B": 2}),
    "vit_l": ("hf:ViTModel", None, {"add_pooling_layer": "false", "num_hidden_layers": "2", **SMALL_VIT},
              {"L": 2, "B": 2, "img": 32, "C": 64, "heads": 2}),
    "vit_h": ("hf:ViTModel", None, {"add_pooling_layer": "false", "num_hidden_layers": "2", "hidden_size": "1280",
                                    "num_attention_heads": "16", "intermediate_size": "5120", "patch_size": "14"},
              {"L": 2, "B": 2}),
    "clip_vit_l14": ("hf:CLIPVisionModelWithProjection", None, {
        "hidden_size": "64", "intermediate_size": "256", "num_hidden_layers": "2", "num_attention_heads": "2",
        "patch_size": "14", "projection_dim": "16", "image_size": "28"}, {"L": 2, "B": 2, "img": 28, "C": 64,
                                                                          "heads": 2, "E": 16}),
    "siglip_b16": ("hf:SiglipVisionModel", None, {"hidden_size": "64", "intermediate_size": "128",
                                                  "num_hidden_layers": "2", "num_attention_heads": "2",
                                                  "image_size": "32", "patch_size": "16"},
                   {"B": 2, "img": 32, "C": 64, "heads": 2, "L": 2, "F": 128}),
    "bert_base": ("hf:BertModel", None, {"add_pooling_layer": "false", "num_hidden_layers": "2"},
                  {"L": 2, "B": 2, "S": 16}),
    "gpt2_small": ("hf:GPT2LMHeadModel", None, {"activation_function": "gelu_pytorch_tanh", "n_layer": "2"},
                   {"L": 2, "B": 2, "S": 16}),
    "pythia_160m": ("hf:GPTNeoXModel", None, {"hidden_size": "64", "num_hidden_layers": "2", "num_attention_heads": "2",
                                              "intermediate_size": "128", "vocab_size": "100"},
                    {"B": 2, "S": 16, "C": 64, "heads": 2, "F": 128, "L": 2, "V": 100}),
    "llama_1b": ("hf:LlamaForCausalLM", str(CONFIGS / "llama_1b.json"), {"num_hidden_layers": "2"},
                 {"L": 2, "B": 2, "S": 16}),
    # (the real config at small widths; GQA kept: 8 query heads, 2 key/value heads of dim 32)
    "llama3_8b": ("hf:LlamaForCausalLM", str(CONFIGS / "llama3_8b.json"), {
        "num_hidden_layers": "2", "hidden_size": "256", "intermediate_size": "384", "num_attention_heads": "8",
        "num_key_value_heads": "2", "head_dim": "32", "vocab_size": "1000", "bos_token_id": "1", "eos_token_id": "1"},
        {"L": 2, "B": 2, "S": 16, "C": 256, "F": 384, "heads": 8, "KV": 2, "V": 1000}),
    "mistral_7b": ("hf:MistralModel", None, {
        "num_hidden_layers": "2", "hidden_size": "256", "intermediate_size": "384", "num_attention_heads": "8",
        "num_key_value_heads": "2", "head_dim": "32", "vocab_size": "1000", "sliding_window": "16"},
        {"B": 2, "S": 64, "W": 16, "L": 2, "C": 256, "F": 384, "heads": 8, "KV": 2, "V": 1000}),
    # the row mapping runs batched_mm (countable on meta in fp32); the saved bytes the default grouped_mm
    "mixtral_8x7b": ("hf:MixtralModel", None, {
        "num_hidden_layers": "2", "hidden_size": "256", "intermediate_size": "384", "num_attention_heads": "8",
        "num_key_value_heads": "2", "vocab_size": "1000", "num_local_experts": "4",
        "_experts_implementation": "batched_mm"}, {"B": 2, "S": 16, "L": 2, "C": 256, "F": 384, "heads": 8, "KV": 2,
                                                   "V": 1000, "E": 4}),
    "deepseek_v3": ("hf:DeepseekV3ForCausalLM", None, {
        "num_hidden_layers": "2", "first_k_dense_replace": "1", "hidden_size": "64", "num_attention_heads": "4",
        "num_key_value_heads": "4", "q_lora_rank": "24", "kv_lora_rank": "16", "qk_nope_head_dim": "8",
        "qk_rope_head_dim": "4", "v_head_dim": "8", "intermediate_size": "96", "n_routed_experts": "8",
        "num_experts_per_tok": "2", "moe_intermediate_size": "16", "n_shared_experts": "1", "n_group": "4",
        "topk_group": "2", "vocab_size": "100", "_experts_implementation": "batched_mm"},
        {"B": 2, "S": 8, "C": 64, "heads": 4, "RQ": 24, "R": 16, "DN": 8, "DR": 4, "DV": 8, "F": 96, "E": 8, "K": 2,
         "FE": 16, "SH": 1, "G": 4, "TG": 2, "Ld": 1, "Lm": 1, "V": 100}),
    "gemma2_2b": ("hf:Gemma2ForCausalLM", None, {
        "num_hidden_layers": "2", "hidden_size": "64", "num_attention_heads": "4", "num_key_value_heads": "2",
        "head_dim": "16", "intermediate_size": "96", "vocab_size": "100", "sliding_window": "16"},
        {"B": 2, "S": 64, "W": 16, "L": 2, "C": 64, "F": 96, "heads": 4, "KV": 2, "D": 16, "V": 100}),
    "t5_small_encoder": ("hf:T5EncoderModel", None, {"num_layers": "2", "num_heads": "2", "d_kv": "32", "d_model": "64",
                                                     "d_ff": "128", "vocab_size": "100"},
                         {"B": 2, "S": 16, "L": 2, "heads": 2, "D": 32, "C": 64, "F": 128, "V": 100}),
    "resnet50": ("hf:ResNetModel", None, {"embedding_size": "8", "hidden_sizes": "[32, 32, 64, 64]",
                                          "depths": "[2, 2, 2, 2]"},
                 {"B": 2, "img": 64, "E": 8, "W1": 8, "W2": 8, "W3": 16, "W4": 16, "D1": 2, "D2": 2, "D3": 2, "D4": 2}),
    "mobilenet_v2": ("hf:MobileNetV2Model", None, {}, {"B": 2, "img": 32}),
    # (the widths of ConvNeXt-T: the layer norms' fp32 statistics are 4 bytes a row, over 1% at 16 channels)
    "convnext_tiny": ("hf:ConvNextModel", None, {"depths": "[2, 2, 2, 2]"},
                      {"B": 2, "img": 64, "D1": 2, "D2": 2, "D3": 2, "D4": 2}),
    "swin_tiny": ("hf:SwinModel", None, {"image_size": "64", "window_size": "2", "embed_dim": "16",
                                         "num_heads": "[1, 2, 2, 2]"},  # (depths 2, 2, 6, 2: the spec's variants)
                  {"B": 2, "img": 64, "win": 2, "C": 16, "H1": 1, "H2": 2, "H3": 2, "H4": 2}),
    "yolos_small": ("hf:YolosForObjectDetection", None, {
        "hidden_size": "32", "num_attention_heads": "2", "intermediate_size": "64", "num_hidden_layers": "3",
        "num_detection_tokens": "5", "num_labels": "7", "image_size": "[64, 96]"},
        {"B": 1, "C": 32, "heads": 2, "F": 64, "L": 3, "det": 5, "labels": 7, "gh": 4, "gw": 6, "img_h": 64,
         "img_w": 96}),
    "mamba_130m": ("hf:MambaForCausalLM", None, {"num_hidden_layers": "2", "hidden_size": "64", "state_size": "4",
                                                 "time_step_rank": "4", "vocab_size": "100"},
                   {"B": 2, "S": 8, "L": 2, "C": 64, "N": 4, "R": 4, "V": 100}),
    # (the activation between fc1 and fc2, a module of the MLP's two sources, is the MLP's)
    "whisper_tiny_encoder": ("hf:WhisperEncoder", None, {
        "encoder_layers": "2", "encoder_attention_heads": "2", "d_model": "64", "encoder_ffn_dim": "128",
        "num_mel_bins": "8", "max_source_positions": "16"}, {"B": 2, "S": 16, "L": 2, "heads": 2, "C": 64, "F": 128,
                                                              "M": 8}),
    "efficientnet_b0": ("hf:EfficientNetModel", None, {  # narrower stages at 64 px, as tests/zoo checks them
        "width_coefficient": "1.0", "depth_coefficient": "1.0", "hidden_dim": "1280", "image_size": "64", "in_channels": "[32, 8, 8, 16, 16, 16, 24]", "out_channels": "[8, 8, 16, 16, 16, 24, 24]"},
        {"B": 2, "img": 64, "C1": 8, "C2": 8, "C3": 16, "C4": 16, "C5": 16, "C6": 24, "C7": 24}),
    "sam_vit_b": ("hf:SamVisionModel", None, {"hidden_size": "32", "num_attention_heads": "2", "image_size": "80",
                                              "window_size": "3", "output_channels": "8"},
                  {"B": 2, "img": 80, "C": 32, "heads": 2, "L": 12, "win": 3, "N": 8}),  # 5 x 5 tokens, padded to 6 x 6
}
# mamba compared in fp32, where the expected rule bytes below are written (in 16 bits its saved bytes equal
# autograd on the generated module: tests/zoo/test_saved_bytes.py, tests/runtime/test_saved_ssm.py)
DTYPES = {"mamba_130m": "fp32"}
NO_SDPA = {"deepseek_v3", "gemma2_2b", "sam_vit_b", "efficientnet_b0", "t5_small_encoder", "swin_tiny", "resnet50", "mobilenet_v2", "convnext_tiny", "mamba_130m"}
POOLED = {"efficientnet_b0", "resnet50", "mobilenet_v2", "convnext_tiny", "swin_tiny", "siglip_b16"}  # compared at pooler_output
SAVED_CONFIG = {"mixtral_8x7b": {"_experts_implementation": "grouped_mm"},
                "deepseek_v3": {"_experts_implementation": "grouped_mm"}}  # set after the row mapping
# Rules that are how the real model computes, not bookkeeping: the 1% comparison takes the spec with them
# (the attention kernel meta ran, transformers' written-out RMSNorm, T5's bucket ids made per forward, the
# grouped_mm experts' sort, the sinks' row max with its indices and, for the convolutional nets, the
# per-channel statistics meta's batch_norm returns in eval mode)
AS_RUN = ("sdpa-kernel-on-meta", "attention-eager-kernel", "rmsnorm-written-out", "t5-bucket-ids",
          "batchnorm-eval-statistics-on-meta", "rel-pos-qkv-storage", "eager-softmax-fp32", "router-fp32",
          "router-logits-fp32", "grouped-mm-routing-indices", "attention-sinks-max-indices")
# MobileNetV2's inverted residuals (Sandler et al. 2018, Table 2): expansion t, output channels c, repeats n
MOBILENET_V2 = ((1, 16, 1), (6, 24, 2), (6, 32, 3), (6, 64, 4), (6, 96, 3), (6, 160, 3), (6, 320, 1))


def compared(name: str, path=None):
    target, config, sets, dims = CASES[name]
    path, dtype = path or ROOT / "specs" / f"{name}.yaml", DTYPES.get(name)
    model = load(path, dtype=dtype)
    values = model.bind(sets=dims)
    real = load_target(target, model, values, "meta", config, sets,
                       output="pooler_output" if name in POOLED else None)
    result = validate_against(model, values, real, "forward")  # (the row mapping)
    for key, value in SAVED_CONFIG.get(name, {}).items():
        setattr(real.module.config, key, value)
    return model, values, compare_saved_against(model, values, real, result.rowmap, kernel(path, "math", dtype),
                                                kernel(path, "eager", dtype))


def spec_file(name: str, tmp_path):
    """The zoo spec, Gemma 2's at two layers: its global layers' indices cut to the odd ones below L = 2."""
    if name != "gemma2_2b":
        return None
    text = (ROOT / "specs" / f"{name}.yaml").read_text()
    full = "indices: [1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25]"
    assert full in text
    path = tmp_path / f"{name}.yaml"
    path.write_text(text.replace(full, "indices: [1]"))
    return path


def kernel(path, backend: str, dtype: str | None):
    """The spec at another attention backend, None where it has no such form (soft-capping has no math one)."""
    try:
        return load(path, backend=backend, dtype=dtype)
    except SpecError:
        return None


def used(comparison) -> dict[str, int]:
    out: dict[str, int] = {}
    for u in comparison.rules:
        if u.used:
            out[u.rule] = out.get(u.rule, 0) + u.bytes
    return out


def expected_rules(name: str, model, values) -> dict[str, int]:
    """Each named difference from the dims: layer norms' fp32 statistics (16-bit dtypes), the index tensors the
    real model makes, the rotary tables, transformers' written-out RMSNorm (x in fp32, rstd, x normalised)."""
    d = {str(k): int(v) for k, v in values.items()}
    b = model.precision.bytes_per_element
    if name in POOLED and name != "siglip_b16":
        return convnet_rules(name, d, b)
    L, B, S = d.get("L", 0), d["B"], d["S"]
    T = B * S
    if name in ("llama_1b", "llama3_8b", "mistral_7b", "mixtral_8x7b"):
        C, head = d["C"], d["C"] // d["heads"]
        out = {"rmsnorm-written-out": (2 * L + 1) * T * (4 * C + 4 + b * C), "rope-tables-per-forward": 2 * S * head * b}
        if name == "mixtral_8x7b":  # the router's fp32 scores and weights; grouped_mm's sort of the T*K rows
            E, K = d["E"], d["K"]
            out |= {"router-fp32": L * T * (E + 2 * K + 1) * (4 - b), "grouped-mm-routing-indices": L * (24 * T * K + 4 * E)}
        return out
    if name == "deepseek_v3":  # 2 norms a layer and the final one; MLA's q_a and kv_a norms; the MoE layers' router
        C, E, K, layers = d["C"], d["E"], d["K"], d["Ld"] + d["Lm"]
        return {"rmsnorm-written-out": (2 * layers + 1) * T * (4 * C + 4 + b * C) - layers * T * (d["RQ"] + d["R"]) * (4 - b),
                "rope-tables-per-forward": 2 * S * d["DR"] * b,
                "router-fp32": d["Lm"] * T * (E + 2 * K + 1) * (4 - b), "router-logits-fp32": d["Lm"] * 4 * C * (T + E),
                "grouped-mm-routing-indices": d["Lm"] * (24 * T * K + 4 * E)}
    if name == "gemma2_2b":  # 4 norms a layer and the final one; every layer's softmax (eager: soft-capping)
        return {"rmsnorm-one-plus-weight": (4 * L + 1) * 4 * d["C"], "rope-tables-per-forward": 2 * S * d["D"] * b,
                "eager-softmax-fp32": L * 4 * B * d["heads"] * S * S}
    if name == "sam_vit_b":  # global layers over the G x G grid, the others over windows padding it
        from transformers import SamVisionConfig

        G, w, C = d["img"] // 16, d["win"], d["C"]
        g = len(SamVisionConfig().global_attn_indexes)
        M = B * ((G + w - 1) // w * w) ** 2
        return {"layernorm-fp32-statistics": (2 * L + 2) * 2 * T * (4 - b),  # the neck's two over the grid too
                "rel-pos-index-ids": 8 * (g * 2 * G * G + (L - g) * 2 * w * w),
                "rel-pos-qkv-storage": 2 * C * b * (g * T + (L - g) * M)}
    if name == "mamba_130m":  # a norm a block and the final one, written out; in fp32 as many bytes as the spec's
        return {"rmsnorm-written-out": (L + 1) * T * (4 * d["C"] + 4 + b * d["C"])}
    if name == "t5_small_encoder":  # the first block's bucket ids; T5's RMSNorm as the spec's
        return {"t5-bucket-ids": 8 * S * S}
    if name == "clip_vit_l14":  # ln_post normalises the class token only (B rows)
        return {"layernorm-fp32-statistics": 2 * ((2 * L + 1) * T + B) * (4 - b)}
    if name == "siglip_b16":  # the pooling head: its norm over B rows (one query), its probe repeated B times
        return {"layernorm-fp32-statistics": 2 * ((2 * L + 1) * T + B) * (4 - b), "probe-repeated": B * d["C"] * b}
    out = {"layernorm-fp32-statistics": (2 * L + 1) * 2 * T * (4 - b)}
    if name in ("bert_base", "gpt2_small"):
        out["index-tensors"] = 8 * S
    if name == "pythia_160m":  # rotary_pct 0.25: the tables span a quarter of each head
        out["rope-tables-per-forward"] = 2 * S * (d["C"] // d["heads"] // 4) * b
    return out


def convnet_rules(name: str, d: dict[str, int], b: int) -> dict[str, int]:
    """Batch norms in eval mode: 8 bytes a channel (meta's statistics); layer norms: 2*(4 - b) bytes a row."""
    B = d["B"]
    if name == "resnet50":  # the stem's bn; per bottleneck bn W, W, 4W; the first block's shortcut bn 4W
        return {"batchnorm-eval-statistics-on-meta": 8 * (d["E"] + sum(
            (6 * d[f"D{i}"] + 4) * d[f"W{i}"] for i in range(1, 5)))}
    if name == "mobilenet_v2":  # the stem (32), expand (t*in, t > 1), depthwise (t*in), project (c); the 1x1 (1280)
        channels, cin = 32, 32
        for t, c, n in MOBILENET_V2:
            for _ in range(n):
                channels += (2 * t * cin if t > 1 else cin) + c
                cin = c
        return {"batchnorm-eval-statistics-on-meta": 8 * (channels + 1280)}
    if name == "efficientnet_b0":  # the stem (32); a block: expand (6*in, not in stage 1), depthwise, project
        channels, cin = 32, 32  # (its out channels); the head's 1x1 (1280). Stages 1 and 7 have one block
        for i in range(1, 8):
            t, cout = (1 if i == 1 else 6), d[f"C{i}"]
            for _ in range(d.get(f"R{i}", 1)):
                channels += (2 * t * cin if t > 1 else cin) + cout
                cin = cout
        return {"batchnorm-eval-statistics-on-meta": 8 * (channels + 1280)}
    if name == "convnext_tiny":  # stage grids img/4, /8, /16, /32: the stem's and D_i blocks' norms at T_i rows,
        T = [B * (d["img"] // 4 // 2 ** i) ** 2 for i in range(4)]  # the downsamples' at T_(i-1), the pooled B
        rows = T[0] + sum(d[f"D{i + 1}"] * T[i] for i in range(4)) + sum(T[:3]) + B
    else:  # swin: the patch embedding's norm, two per block, each merge's at the next grid, the final one
        T = [B * (d["img"] // 4 // 2 ** i) ** 2 for i in range(4)]
        depths = [d.get(f"D{i + 1}", (2, 2, 6, 2)[i]) for i in range(4)]
        rows = T[0] + sum(2 * depths[i] * T[i] for i in range(4)) + sum(T[1:]) + T[3]
    return {"layernorm-fp32-statistics": 2 * rows * (4 - b)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_saved_bytes_match_the_real_model_per_row(name, tmp_path):
    model, values, comparison = compared(name, spec_file(name, tmp_path))
    assert not comparison.failures(), comparison.failures()
    spec, real, rules = comparison.totals
    assert spec + rules == real and len(comparison.rows) >= 5
    found = used(comparison)
    expected = expected_rules(name, model, values)
    if name not in NO_SDPA:  # (T5 and Swin run their attention eagerly, as their specs do; the others have none)
        assert found["sdpa-kernel-on-meta"] > 0  # meta runs the math SDPA: the spec at backend math
        expected["sdpa-kernel-on-meta"] = found["sdpa-kernel-on-meta"]
    if name == "siglip_b16":  # the pooling head's nn.MultiheadAttention runs its own softmax: the spec at eager
        assert found["attention-eager-kernel"] > 0
        expected["attention-eager-kernel"] = found["attention-eager-kernel"]
    if name == "gemma2_2b":  # the rotary tables are the first layer's the model runs (index 0: a sliding one)
        assert [u.row for u in comparison.rules if u.rule == "rope-tables-per-forward"] == ["layers[others].attn"]
    # (1 + weight) is offered where the matched real norm scales so (Gemma's), so other reports do not list it
    assert ("rmsnorm-one-plus-weight" in {u.rule for u in comparison.rules}) == (name == "gemma2_2b")
    if "rmsnorm-written-out" in found:  # the rule replaces the spec's own bytes of the RMSNorm rows
        norms = sum(s for row, s, _, _ in comparison.rows if "norm" in row)
        expected["rmsnorm-written-out"] -= norms
    assert found == expected
    # within 1% of the real model, the spec taken as the real model runs (the kernel; for Llama transformers'
    # written-out RMSNorm in place of torch's, a 7% difference without it); the other rules are under 1%
    assert abs(real - (spec + sum(found.get(r, 0) for r in AS_RUN))) / real < 0.01


def test_batched_mm_experts_keep_their_gathered_weights(monkeypatch):
    """As `validate --against` runs DeepSeek-V3 for its FLOPs (batched_mm): each (token, expert) row's gathered
    gate_up and down weights, no grouped_mm sort."""
    monkeypatch.setattr("tests.against.test_saved_against.SAVED_CONFIG", {})
    model, values, comparison = compared("deepseek_v3")
    assert not comparison.failures(), comparison.failures()
    d = {str(k): int(v) for k, v in values.items()}
    found = used(comparison)
    T, b = d["B"] * d["S"], model.precision.bytes_per_element
    assert found["batched-mm-gathered-weights"] == d["Lm"] * T * d["K"] * 3 * d["FE"] * d["C"] * b
    assert "grouped-mm-routing-indices" not in found


def test_a_difference_no_rule_names_fails(monkeypatch):
    monkeypatch.setattr(saved_module, "RULES", tuple(r for r in saved_module.RULES
                                                     if r.name != "layernorm-fp32-statistics"))
    _, _, comparison = compared("vit_b")
    failures = comparison.failures()
    assert failures and all("saved for backward" in f and "norm" in f for f in failures)


def test_the_cli_compares_with_saved_bytes_and_pass_train():
    target = "hf:ViTModel"
    sets = {"add_pooling_layer": "false", "num_hidden_layers": "2", "image_size": "32", "hidden_size": "64",
            "num_attention_heads": "2", "intermediate_size": "256"}
    dims = {"L": 2, "img": 32, "C": 64, "heads": 2}
    args = ["validate", str(ROOT / "specs/vit_b.yaml"), "--against", target, "--pass", "train", "--saved-bytes",
            "--format", "json", *[f"--set={k}={v}" for k, v in dims.items()],
            *[a for k, v in sets.items() for a in ("--config-set", f"{k}={v}")]]
    r = invoke(*args)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    saved = json.loads(r.stdout)["saved_for_backward"]
    total = saved["total"]
    assert total["spec"] + total["rules"] == total["real"]
    assert {u["rule"] for u in saved["rules"] if u["used"]} == {"layernorm-fp32-statistics", "sdpa-kernel-on-meta"}
    forward = invoke(*[a if a != "train" else "forward" for a in args])
    assert forward.returncode == 0
    assert "saved_for_backward" not in json.loads(forward.stdout)


@pytest.mark.parametrize("pass_, device, checkpoint, why", [
    ("forward", "meta", None, "--pass train only"), ("train", "cpu", None, "on meta only"),
    ("train", "meta", "blocks", "activation checkpointing")])
def test_when_the_real_model_is_not_compared_a_note_says_why(pass_, device, checkpoint, why):
    from costspec.against.saved import saved_against

    model = load(ROOT / "specs" / "vit_b.yaml", checkpoint=checkpoint)
    compared_, notes = saved_against(model, model.bind(), None, None, pass_, device, lambda _: model)
    assert compared_ is None and len(notes) == 1 and why in notes[0]


def test_every_rule_is_in_validation_md():
    text = (ROOT / "docs" / "validation.md").read_text(encoding="utf-8")
    kernels = ("sdpa-kernel-on-meta", "attention-eager-kernel")  # (the spec at another kernel: no formula of its own)
    missing = [name for name in [r.name for r in saved_module.RULES] + list(kernels) if f"| `{name}` |" not in text]
    assert not missing, missing
