"""Property-based fuzzing of every non-spec input file (bounded for CI; the long run is
`python fuzz/run_fuzz.py --mode inputs`). Strategies: fuzz/inputgen.py; the property
(fuzz/input_properties.py): through the real commands, a GPU catalog, a calibration file, an
ncu CSV or a sidecar gives a result or a CostspecError (exit 1 / 2), never an internal error or
a hang, and a file drawn as valid is accepted.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from fuzz.input_properties import check_input
from fuzz.surfacegen import STRATEGIES, hf_config_texts

# A few seconds per kind on 2 shared cores, reproducible.
# No shrinking: an input that fails is printed as drawn (shrinking a 5,000-digit CSV takes minutes).
FAST = {"max_examples": 25, "deadline": None, "derandomize": True, "database": None, "phases": [Phase.generate],
        "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]}


@pytest.mark.parametrize("kind", sorted(STRATEGIES))
def test_input_files_give_a_result_or_a_clean_error(kind):
    # an HF config that imports is a full-size spec built (up to a second each): fewer of them, from the zoo's
    # configs only (the long run adds every family's transformers default)
    @settings(**{**FAST, "max_examples": 10 if kind == "hf" else FAST["max_examples"]})
    @given(hf_config_texts(defaults=False) if kind == "hf" else STRATEGIES[kind]())
    def check(example):
        text, valid = example
        check_input(kind, text, valid)  # raises on an internal error or a refused valid file

    check()


@pytest.mark.parametrize("kind, text", [
    ("catalog", "gpus:\n  mine: {name: Mine, memory_gb: 8, memory_bw_gbps: 100, tensor: {}, cuda: {fp32: 1}}\n"),
    ("calibration", "costspec_calibration: 1\nforward: {epsilon: {gemm: {value: 0.0068, exact: 7/1024}}}\n"),
    ("sidecar", '{"costspec_ncu_sidecar": 1, "pass": "forward", "dims": {"M": 128, "D": 1024, "N": 10}}'),
])
def test_the_property_accepts_a_valid_file(kind, text):
    """The property is not vacuous: a valid file of each kind is accepted by every command."""
    assert check_input(kind, text, valid=True).accepted


def test_the_property_catches_a_refused_valid_file():
    with pytest.raises(AssertionError, match="a valid catalog was refused"):
        check_input("catalog", "gpus: {mine: {name: Mine}}\n", valid=True)
