"""What the import-torch tests check an imported spec with: the real model under FlopCounterMode (forward,
independently of costspec's counters) and `validate --against` (forward and train, after the named rules)."""
from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from costspec.against.check import AgainstResult, summary, validate_against
from costspec.against.target import first_tensor, load_target
from costspec.spec.load import parse_spec
from costspec.tree.network import Network

# the named rules an import may show against the real model on meta: PyTorch's math SDPA (the spec counts the
# flash convention) and FlopCounterMode's grouped-conv weight gradient (it ignores groups)
RULES = {"sdpa-math-decomposition", "conv-grouped-weight-grad", "broadcast-grad-batch-1"}


def spec_matmul(text: str, dims: dict[str, int], phase: str = "forward") -> tuple[int, int]:
    """(matmul-class FLOPs, parameters) of the spec at `dims`, from its symbolic cost (what eval prints)."""
    model = Network(parse_spec(text, "imported.yaml"))
    values = model.bind(sets=dims)
    cost = model.cost(phase)
    return sum(int(e.xreplace(values)) for e in cost.matmul.values()), int(model.cost("forward").params.xreplace(values))


def flop_counter(module: torch.nn.Module, inputs, output_field: str | None = None) -> tuple[int, int]:
    """(FlopCounterMode's forward total, parameters) of the real module on meta."""
    module.eval()
    with FlopCounterMode(display=False) as counter:
        out = module(**inputs) if isinstance(inputs, dict) else module(*inputs) if isinstance(inputs, tuple) \
            else module(inputs)
        first_tensor(out, output_field)
    return counter.get_total_flops(), sum(p.numel() for p in module.parameters())


def against(text: str, target: str, dims: dict[str, int], config=None, sets=None, field=None) -> AgainstResult:
    model = Network(parse_spec(text, "imported.yaml"))
    values = model.bind(sets=dims)
    real = load_target(target, model, values, "meta", config, sets or {}, field)
    return validate_against(model, values, real, "train", "meta")


def assert_exact(result: AgainstResult) -> None:
    """Matmul-class FLOPs and parameters equal, forward as FlopCounterMode counts them, backward after the
    named rules (and only the ones in RULES)."""
    totals = summary(result)
    assert totals["forward"]["spec_matmul"] == totals["forward"]["real_matmul"], totals
    assert totals["backward"]["spec_matmul"] == totals["backward"]["real_reconciled"], totals
    for phase in totals.values():
        assert phase["spec_params"] == phase["real_params"], totals
    named = {a.rule for a in result.reconciliations if not a.rule.startswith("ignore: ")}
    assert named <= RULES, named
    # the spec's own ignore: rules (work a recognised module runs beyond its op) are CUDA-core work only
    assert all(a.matmul == 0 for a in result.reconciliations if a.rule.startswith("ignore: "))
    assert not [f for f in result.failures() if ": matmul" in f or ": params" in f], result.failures()
