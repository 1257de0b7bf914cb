"""`memory --pass train --check` per optimizer torch.optim has (sgd, adam, adamw) on narrow, wide vit_b and
llama_1b (weights outweigh activations, so adam's step peaks): the forward end and, for adam / adamw, the
optimizer step (the peak: the state and the `_foreach_sqrt` copy) equal MemTracker's in every category
without a rule; sgd's step adds nothing to the state, so its peak is in the backward, which MemTracker's
peak exceeds by the gradients an op's backward makes (never below the modelled peak)."""
from __future__ import annotations

import pytest

from costspec.model import load
from costspec.runtime.mem_tracker import check_memory
from tests.common import ROOT

pytest.importorskip("torch")

WIDE = {"vit_b": {"img": 16, "patch": 8, "C": 128, "heads": 2, "L": 2},
        "llama_1b": {"L": 2, "S": 4, "C": 128, "heads": 2, "KV": 1, "F": 512, "V": 64}}
EXACT = ("Parameter", "Gradient", "Optstate", "Activation", "Temp")


def categories(check) -> dict[str, tuple[int, int]]:
    return {ref: (ours, theirs) for ref, ours, theirs, _ in check.rows}


def assert_exact(check):
    got = categories(check)
    for ref in EXACT:
        assert got[ref][0] == got[ref][1], (check.moment, ref, got[ref])


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
@pytest.mark.parametrize("spec", sorted(WIDE))
def test_optimizer_peaks(spec, optimizer):
    model = load(ROOT / "specs" / f"{spec}.yaml")
    values = model.bind(2, WIDE[spec])
    peak, forward = check_memory(model, values, optimizer)
    assert_exact(forward)
    if optimizer == "sgd":
        assert peak.moment == "forward end" and peak.peak[0] < peak.peak[1]
        assert categories(peak)["Optstate"] == (0, 0) and categories(peak)["step counters"] == (0, 0)
    else:
        assert peak.moment == "optimizer step" and peak.ok
        assert_exact(peak)
        weights = categories(peak)["Parameter"][0]
        assert categories(peak)["Optstate"][0] == 3 * weights  # two moments and the _foreach_sqrt copy
