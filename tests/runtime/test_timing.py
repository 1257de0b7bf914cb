"""`costspec time`: the no-GPU path, and the per-layer timing aggregation with a fake timer on CPU."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

import costspec  # noqa: E402
from costspec.analysis.gpus import get_gpu  # noqa: E402
from costspec.analysis.roofline import estimate  # noqa: E402
from costspec.runtime.timing import Intervals, add_estimate, render_json, render_table, time_layers  # noqa: E402
from tests.common import ROOT, invoke  # noqa: E402

TOY = ROOT / "specs" / "toy_mlp.yaml"


class MarkClock:
    """Each mark is one tick later; in repeat r a tick is `scale[r]` ms (the warm-up ends with the
    first sync, each repeat with one more)."""

    def __init__(self, scale=(1.0,)):
        self.now, self.scale, self.syncs = 0.0, list(scale), 0

    def mark(self):
        self.now += self.scale[min(max(self.syncs - 1, 0), len(self.scale) - 1)]
        return self.now

    def elapsed_s(self, start, end) -> float:
        return (end - start) * 1e-3

    def sync(self) -> None:
        self.syncs += 1


def _rows(timing):
    return {r.name: r for r in timing.rows}


@pytest.fixture(scope="module")
def toy():
    model = costspec.load(TOY)
    return model, model.bind(sets={"M": 4, "D": 8, "N": 3})


def test_forward_intervals_per_layer(toy):
    model, values = toy
    t = time_layers(model, values, "forward", warmup=1, repeats=1, device="cpu", timer=MarkClock())
    rows = _rows(t)
    # per instance the marks are: enter layers.i, enter fc, leave fc, enter act, leave act, leave layers.i
    assert rows["layers.fc"].forward_s == pytest.approx(3 * 1e-3)  # 3 instances x 1 tick
    assert rows["layers.act"].forward_s == pytest.approx(3 * 1e-3)
    assert rows["layers"].forward_s == pytest.approx(3 * 5e-3)  # the repeat row sums its instances
    assert t.model_forward_s == pytest.approx(19e-3)  # root: 18 marks inside it
    assert t.step_s == pytest.approx(21e-3)  # the step's own marks around the root
    assert rows["layers.fc"].backward_s is None and t.model_backward_s == 0


def test_median_over_repeats(toy):
    model, values = toy
    t = time_layers(model, values, "forward", warmup=0, repeats=3, device="cpu",
                    timer=MarkClock(scale=(1.0, 5.0, 2.0)))
    assert _rows(t)["layers.fc"].forward_s == pytest.approx(3 * 2e-3)  # median of 3, 15, 6 ticks


def test_train_has_backward_intervals(toy):
    model, values = toy
    t = time_layers(model, values, "train", warmup=1, repeats=2, device="cpu", timer=MarkClock())
    rows = _rows(t)
    for name in ("layers", "layers.fc", "layers.act"):
        assert rows[name].backward_s and rows[name].backward_s > 0
        assert rows[name].measured_s == pytest.approx(rows[name].forward_s + rows[name].backward_s)
    assert t.model_backward_s > 0


def test_estimate_and_rendering(toy):
    model, values = toy
    t = time_layers(model, values, "train", warmup=0, repeats=1, device="cpu", timer=MarkClock())
    add_estimate(t, estimate(model, model.report("train", values), values, get_gpu("h100-sxm")))
    assert all(r.estimate_s is not None for r in t.rows)
    text = render_table(t)
    assert "est. (NVIDIA H100" in text and "measured/est." in text and "bwd" in text
    data = json.loads(render_json(t))
    assert data["gpu"].startswith("NVIDIA H100") and data["rows"][0]["name"] == "layers"


def test_intervals_count_reentries_and_close_backward():
    class Clock:
        now = 0

        def mark(self):
            Clock.now += 1
            return Clock.now

    iv = Intervals(Clock())
    iv.enter("a", "forward")
    iv.enter("a", "forward")  # a module called twice while open (a residual's fork and add)
    iv.exit("a", "forward")
    iv.exit("a", "forward")
    iv.exit("never", "forward")
    iv.enter("b", "backward")
    iv.end_backward()
    assert [(p, path, b - a) for p, path, a, b in iv.closed] == [("forward", "a", 1), ("backward", "b", 1)]


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_no_gpu_says_so_and_exits_2():
    result = invoke("time", TOY, "--pass", "train")
    assert result.returncode == 2
    assert "no CUDA GPU" in result.stderr and "Traceback" not in result.stderr
