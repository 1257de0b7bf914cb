"""The state-space mixers against transformers on meta: `mamba` vs MambaModel, `mamba2` vs Mamba2Model
(2 layers, small widths, forward and train, every row PASS: matmul FLOPs after the named rules, parameters
and every pointwise kind exactly), and the zoo's mamba_130m vs MambaForCausalLM (small here, full width
marked slow).

transformers runs its torch path there: the CUDA kernels (mamba_ssm's selective_scan_fn / mamba_inner_fn,
causal_conv1d, the Triton SSD kernels) are not installed, so its hub wrappers fall back to the reference
implementations in modeling_mamba.py / modeling_mamba2.py, which the ops count.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from costspec.against.check import summary, validate_against  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.model import load, loads  # noqa: E402
from tests.common import ROOT  # noqa: E402

BACKBONE = """\
costspec: 1
name: {name}
dims: {{B: 2, S: {S}, C: {C}, L: 2, V: 100}}
input: [B, S]
blocks:
  block:
    - residual:
        - rmsnorm: {{eps: 1.0e-5}}
          source: norm
        - {op}: {attrs}
          source: mixer
layers:
  - embedding: {{vocab: V, dim: C}}
    name: embeddings
    source: embeddings
  - repeat: L
    name: layers
    body: block
    source: layers
  - rmsnorm: {{eps: 1.0e-5}}
    name: norm_f
    source: norm_f
"""


def run_against(model, target: str, pass_: str, config: dict, sets: dict | None = None):
    values = model.bind(sets=sets or {})
    real = load_target(target, model, values, "meta", None, {k: str(v) for k, v in config.items()})
    return validate_against(model, values, real, pass_)


def assert_exact(result) -> dict:
    assert result.ok, "\n".join(result.failures())
    totals = summary(result)
    for phase in totals.values():
        assert phase["real_reconciled"] == phase["spec_matmul"] and phase["real_params"] == phase["spec_params"]
    assert not result.rowmap.unmatched_real
    for phase in result.phases.values():  # every matched row passes, none is only explained by another row
        assert all(r.status == "PASS" for r in phase.rows if r.matched) and not phase.moved
    return totals


# (spec attributes, the same configuration for transformers' MambaConfig)
MAMBA = {
    "defaults": ("{d_state: 4, dt_rank: 3}", {"state_size": 4, "time_step_rank": 3}),
    "biases": ("{d_state: 3, expand: 1, d_conv: 2, dt_rank: 2, bias: true, conv_bias: false}",
               {"state_size": 3, "expand": 1, "conv_kernel": 2, "time_step_rank": 2, "use_bias": True,
                "use_conv_bias": False}),
}


@pytest.mark.parametrize("pass_", ["forward", "train"])
@pytest.mark.parametrize("variant", sorted(MAMBA))
def test_mamba_matches_transformers_mamba_model(variant, pass_):
    attrs, config = MAMBA[variant]
    model = loads(BACKBONE.format(name="mamba", S=6, C=16, op="mamba", attrs=attrs))
    totals = assert_exact(run_against(model, "hf:MambaModel", pass_, {
        "num_hidden_layers": 2, "hidden_size": 16, "vocab_size": 100, **config}))
    assert totals["forward"]["spec_matmul"] > 0


# S = 10 in chunks of 4 pads the last chunk; G = 2 groups of 2 heads; then chunks dividing S, one head per group
MAMBA2 = {
    "padded": ("{d_state: 8, head_dim: 16, groups: 2, chunk: 4}", 10,
               {"state_size": 8, "head_dim": 16, "num_heads": 4, "n_groups": 2, "chunk_size": 4}),
    "whole_chunks": ("{d_state: 2, head_dim: 16, heads: 4, groups: 4, chunk: 2, bias: true, conv_bias: false, "
                     "d_conv: 3}", 8,
                     {"state_size": 2, "head_dim": 16, "num_heads": 4, "n_groups": 4, "chunk_size": 2,
                      "use_bias": True, "use_conv_bias": False, "conv_kernel": 3}),
}


@pytest.mark.parametrize("pass_", ["forward", "train"])
@pytest.mark.parametrize("variant", sorted(MAMBA2))
def test_mamba2_matches_transformers_mamba2_model(variant, pass_):
    attrs, s, config = MAMBA2[variant]
    model = loads(BACKBONE.format(name="mamba2", S=s, C=32, op="mamba2", attrs=attrs))
    assert_exact(run_against(model, "hf:Mamba2Model", pass_, {
        "num_hidden_layers": 2, "hidden_size": 32, "vocab_size": 100, **config}))


def test_transformers_runs_the_sequential_scan_on_meta():
    """The reference path: one batched matmul per position and layer (the scan's python loop), no fused
    kernel; the conv as aten.convolution."""
    config = transformers.MambaConfig(num_hidden_layers=2, hidden_size=16, state_size=4, vocab_size=100)
    with torch.device("meta"):
        model = transformers.MambaModel(config).eval()
    seen: dict[str, int] = {}

    class Ops(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func._overloadpacket)
            seen[name] = seen.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    with Ops():
        model(torch.zeros(2, 5, dtype=torch.long, device="meta"), use_cache=False)
    assert seen["aten.bmm"] == 5 * 2 and seen["aten.convolution"] == 2 and seen["aten.softplus"] == 2


# mamba_130m at a small size: the same spec with --set, transformers' config with --config-set
SMALL_130M = ({"S": 8, "L": 2, "C": 64, "N": 4, "R": 4, "V": 100},
              {"num_hidden_layers": 2, "hidden_size": 64, "state_size": 4, "time_step_rank": 4, "vocab_size": 100})


@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_mamba_130m_matches_mamba_for_causal_lm_small(pass_):
    sets, config = SMALL_130M
    result = run_against(load(ROOT / "specs/mamba_130m.yaml"), "hf:MambaForCausalLM", pass_, config, sets)
    assert_exact(result)
    # backward: the depthwise conv's weight gradient (FlopCounterMode counts it channels times over) and the
    # tied LM head's gradient sum; nothing else is reconciled
    expected = {"conv-grouped-weight-grad", "tied-weight-grad-sum"} if pass_ == "train" else set()
    assert {a.rule for a in result.reconciliations} == expected


@pytest.mark.slow
@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_mamba_130m_matches_mamba_for_causal_lm_full_width(pass_):
    """The zoo spec at its own widths (24 layers, d_model 768, vocabulary 50280) against MambaConfig with 24
    layers (its other defaults are mamba-130m's), at S = 32: the scan loops over S in python."""
    result = run_against(load(ROOT / "specs/mamba_130m.yaml"), "hf:MambaForCausalLM", pass_,
                         {"num_hidden_layers": 24}, {"S": 32})
    totals = assert_exact(result)
    assert totals["forward"]["spec_params"] == 129_135_360
