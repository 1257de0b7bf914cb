"""specs/deepseek_v3.yaml against transformers' DeepseekV3ForCausalLM, and its full-size totals.

The spec is two repeats (Ld dense blocks, then Lm MoE blocks with multi-head latent attention). The fast
check runs it at small widths (`--set`: one dense and one MoE layer, 8 experts in 4 groups) against the
model built from the same small config on `meta`, forward and train: matmul FLOPs (after the named rules)
and parameters exactly, every pointwise kind named. At full size the parameters and forward matmul FLOPs
are checked against hand formulas of the published dims and against `costspec import hf` of the published
config.json; the full-size forward against transformers itself (10 s) is marked slow.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from costspec.against.check import summary, validate_against  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.importer import import_hf  # noqa: E402
from costspec.model import load, loads  # noqa: E402
from tests.common import ROOT  # noqa: E402
from tests.importer.check import write_config  # noqa: E402
from tests.importer.test_modern import DEEPSEEK_V3_671B  # noqa: E402

SPEC = ROOT / "specs/deepseek_v3.yaml"
BATCHED_MM = {"_experts_implementation": "batched_mm"}
SMALL_DIMS = {"S": 8, "C": 64, "heads": 4, "RQ": 24, "R": 16, "DN": 8, "DR": 4, "DV": 8, "F": 96, "E": 8, "K": 2,
              "FE": 16, "SH": 1, "G": 4, "TG": 2, "Ld": 1, "Lm": 1, "V": 100}
SMALL_CONFIG = {"num_hidden_layers": 2, "first_k_dense_replace": 1, "hidden_size": 64, "num_attention_heads": 4,
                "num_key_value_heads": 4, "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
                "qk_rope_head_dim": 4, "v_head_dim": 8, "intermediate_size": 96, "n_routed_experts": 8,
                "num_experts_per_tok": 2, "moe_intermediate_size": 16, "n_shared_experts": 1, "n_group": 4,
                "topk_group": 2, "vocab_size": 100, **BATCHED_MM}


def against(pass_: str, dims: dict, config: dict):
    model = load(SPEC)
    values = model.bind(sets=dims)
    real = load_target("hf:DeepseekV3ForCausalLM", model, values, "meta", None,
                       {k: str(v) for k, v in config.items()})
    return validate_against(model, values, real, pass_)


def assert_exact(result) -> dict:
    assert result.ok, "\n".join(result.failures())
    totals = summary(result)
    for phase in totals.values():
        assert phase["real_reconciled"] == phase["spec_matmul"] and phase["real_params"] == phase["spec_params"]
    assert not result.rowmap.unmatched_real and not result.unknown
    return totals


def forward_matmul(d: dict) -> int:
    """Forward matmul FLOPs (2 per multiply-add), B = 1, T = S tokens: per layer MLA's five projections and
    its SDPA over DN + DR (scores) and DV (values) dims; the dense SwiGLU or the router, K routed experts per
    token and the shared expert; the LM head."""
    T = S = d["S"]
    C, h, RQ, R, DN, DR, DV = (d[k] for k in ("C", "heads", "RQ", "R", "DN", "DR", "DV"))
    mla = (2 * T * (C * RQ + RQ * h * (DN + DR) + C * (R + DR) + R * h * (DN + DV) + h * DV * C)
           + 2 * h * S * S * (DN + DR + DV))
    dense = 6 * T * C * d["F"]
    moe = 2 * T * C * d["E"] + 6 * T * d["K"] * C * d["FE"] + 6 * T * C * d["FE"] * d["SH"]
    return (d["Ld"] + d["Lm"]) * mla + d["Ld"] * dense + d["Lm"] * moe + 2 * T * C * d["V"]


def params(d: dict) -> int:
    """MLA (q_a, its norm, q_b, kv_a, its norm, kv_b, o) and two RMSNorms per layer; dense SwiGLU or router +
    E experts + shared; embedding, final norm, untied head."""
    C, h, RQ, R, DN, DR, DV = (d[k] for k in ("C", "heads", "RQ", "R", "DN", "DR", "DV"))
    mla = C * RQ + RQ + RQ * h * (DN + DR) + C * (R + DR) + R + R * h * (DN + DV) + h * DV * C
    moe = C * d["E"] + 3 * C * d["FE"] * (d["E"] + d["SH"])
    return (d["Ld"] + d["Lm"]) * (mla + 2 * C) + d["Ld"] * 3 * C * d["F"] + d["Lm"] * moe + 2 * d["V"] * C + C


@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_small_deepseek_v3_matches_deepseek_v3_for_causal_lm(pass_):
    result = against(pass_, SMALL_DIMS, SMALL_CONFIG)
    totals = assert_exact(result)
    assert totals["forward"]["spec_matmul"] == forward_matmul(SMALL_DIMS)
    assert totals["forward"]["spec_params"] == params(SMALL_DIMS)
    # the dense layer is model.layers.0, the MoE layer model.layers.1 (the second repeat starts where the
    # first ended); the MoE layer's score-correction bias is a buffer
    assert result.buffers["model.layers.1.mlp.gate.e_score_correction_bias"] == SMALL_DIMS["E"]


def test_full_size_totals_are_the_published_models(tmp_path):
    """671,026,404,352 parameters, as DeepseekV3ForCausalLM builds them from the published config (the MTP
    module is not part of it), and the same totals as `costspec import hf` of that config.json (S = 4096)."""
    model = load(SPEC)
    values = model.bind()
    dims = {str(k): int(v) for k, v in values.items()}
    report = model.report("forward", values)
    assert report.params == params(dims) == 671_026_404_352
    assert report.tc == forward_matmul(dims) == 383_866_460_176_384
    imported = loads(import_hf(write_config(DEEPSEEK_V3_671B, tmp_path)).text)
    other = imported.report("forward", imported.bind())
    assert (other.params, other.tc) == (report.params, report.tc)
    train, imported_train = model.report("train", values), imported.report("train", imported.bind())
    assert (train.tc, train.cuda) == (imported_train.tc, imported_train.cuda)


@pytest.mark.slow
def test_full_size_forward_matches_deepseek_v3_for_causal_lm():
    """The published model (transformers' DeepseekV3Config defaults are DeepSeek-V3's) on meta, forward."""
    totals = assert_exact(against("forward", {}, BATCHED_MM))
    assert totals["forward"]["real_matmul"] == 383_866_460_176_384
    assert totals["forward"]["real_params"] == 671_026_404_352
