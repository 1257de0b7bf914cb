"""`costspec validate --against`: a spec checked against a real model, not against its own module.

The real models are small torch modules (tests/against/models.py): what a user's own code would build.
The zoo against its transformers classes is tests/zoo/test_against_transformers.py.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from costspec.against.mapping import compact  # noqa: E402
from costspec.against.report import to_result  # noqa: E402
from costspec.core.errors import UsageError  # noqa: E402
from costspec.core.render import render  # noqa: E402
from costspec.model import loads  # noqa: E402
from costspec.runtime.validate import validate  # noqa: E402
from tests.against.helpers import BN_AS_LN2D, against, failures_text  # noqa: E402
from tests.common import ROOT, invoke, run_cli  # noqa: E402


# ----------------------------------------------------------------------------------------------
# The toy MLP against a plain torch module
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_toy_mlp_matches_its_plain_torch_module(pass_):
    model, result = against(ROOT / "specs/toy_mlp.yaml", "tests.against.models:toy_mlp", pass_)
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
    _, result = against(ROOT / "specs/toy_mlp.yaml", "tests.against.models:toy_mlp_with_inputs")
    assert result.ok, failures_text(result)
    assert any("example inputs" in line for line in result.described)


# ----------------------------------------------------------------------------------------------
# Deliberately wrong specs: PASS plain validate, FAIL --against, naming the layer and the kind
# ----------------------------------------------------------------------------------------------

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
    (BN_AS_LN2D, "tests.against.models:conv_bn", "norm",
     {"layernorm", "batchnorm_eval"}),  # the real BatchNorm2d (eval mode) counted by its own kind
    (SHORTCUT_AS_GROUPED_CONV, "tests.against.models:projection_shortcut", "block", {"add"}),
    (NO_LAYER_SCALE, "tests.against.models:layer_scale", "blocks", {"params", "mul"}),
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
    _, result = against(NO_LAYER_SCALE, "tests.against.models:layer_scale")
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
        _, result = against(spec, "tests.against.models:parallel_residual", pass_)
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
        against(spec, "tests.against.models:conv_bn")


def test_unmatched_real_modules_and_rows_are_listed():
    spec = BN_AS_LN2D.replace("  - conv2d: {out: C, kernel: 3, padding: 1, bias: false}\n    name: conv\n",
                              "  - conv2d: {out: C, kernel: 3, padding: 1, bias: false}\n    name: conv\n"
                              "    source: act\n")  # a wrong source: the conv's module stays unclaimed
    _, result = against(spec, "tests.against.models:conv_bn")
    assert "conv" in result.rowmap.unmatched_real
    assert "act" in result.rowmap.unmatched_rows


def test_ignore_leaves_a_module_out_with_its_numbers():
    spec = BN_AS_LN2D.replace("layers:\n", "ignore:\n  - {module: norm, reason: compared elsewhere}\nlayers:\n", 1)
    norm = BN_AS_LN2D[BN_AS_LN2D.index("  - layernorm2d"):BN_AS_LN2D.index("  - activation")]
    spec = spec.replace(norm, "")
    _, result = against(spec, "tests.against.models:conv_bn")
    assert result.ok, failures_text(result)
    (entry,) = result.ignored
    assert entry.paths == ["norm"] and entry.params == 2 * 16  # BatchNorm2d(16): weight + bias
    assert entry.pointwise["forward"] == {"batchnorm_eval": 2 * 16 * 8 * 8}
    text = render(to_result(result))
    assert "compared elsewhere" in text and "result: PASS" in text


def test_ignore_that_matches_nothing_is_a_problem():
    spec = BN_AS_LN2D.replace("layers:\n", "ignore:\n  - {module: pooler, reason: not there}\nlayers:\n", 1)
    _, result = against(spec, "tests.against.models:conv_bn")
    assert "ignore: pooler matches no module of the real model" in result.problems


@pytest.mark.slow
def test_cli_against_exit_codes(tmp_path):
    """Exit 0 / 1 / 2; the real models are a user's module in the working directory, imported by name by the
    `costspec` process started there (a subprocess: the import is what is tested)."""
    (tmp_path / "my_models.py").write_text((ROOT / "tests/against/models.py").read_text())
    spec = tmp_path / "bn.yaml"
    spec.write_text(BN_AS_LN2D)
    plain = invoke("validate", spec, cwd=tmp_path)
    assert plain.returncode == 0 and "checked against: the torch module costspec generates" in plain.stdout
    wrong = run_cli("validate", spec, "--against", "my_models:conv_bn", cwd=tmp_path)
    assert wrong.returncode == 1, wrong.stderr
    assert "FAIL: forward: norm: layernorm" in wrong.stdout
    good = run_cli("validate", ROOT / "specs/toy_mlp.yaml", "--against", "my_models:toy_mlp", "--pass", "train",
                   "--format", "json", cwd=tmp_path)
    assert good.returncode == 0, good.stderr
    assert '"checked_against": "the real model"' in good.stdout
    usage = invoke("validate", spec, "--config-set", "a=1", cwd=tmp_path)
    assert usage.returncode == 2 and "need --against" in usage.stderr
