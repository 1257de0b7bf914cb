"""The properties every spec must have, checked on one spec text at a time.

1. Loading either returns a Model or raises a `costspec.core.errors.CostspecError`; never another
   exception.
2. For an accepted spec, at the default dims and at a second batch size:
   * `Model.evaluate(pass_)` totals equal `Model.cost(pass_)` with the dims substituted
     (`xreplace(Model.bind())`), for forward, backward and train;
   * train = forward + backward (Tensor-Core and CUDA-core FLOPs; params as forward);
   * report rows have unique names, and the top-level rows sum to the totals.
3. (sampled) The torch module built from the spec, run on `meta`, has matmul-class FLOPs equal
   to FlopCounterMode's with 0 relative error, and the same pointwise kinds and element
   counts (`costspec.runtime.validate`, every named reconciliation applied).

`check_spec` raises AssertionError (with the spec text) when a property fails; exceptions
other than CostspecError propagate. Failures that match a known, reported bug (`KNOWN_BUGS`,
each with a strict-xfail reproducer in tests/fuzz/test_specs.py) are returned as such instead, so a
fuzz run keeps going and counts them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import sympy

import costspec
from costspec.core.errors import CostspecError
from costspec.tree.nodes import OpNode

PASSES = ("forward", "backward", "train")
MAX_INSTANCES = 400  # op instances in the torch module (repeats unrolled) for the meta check


@dataclass
class Outcome:
    accepted: bool = False
    error: str = ""  # the CostspecError of a rejected spec
    validated: bool = False
    known: list[str] = field(default_factory=list)  # ids of known bugs this spec hit


# ----------------------------------------------------------------------------------------------
# Known bugs: (id, test(model, exc) -> bool). Each has a strict-xfail reproducer in tests/fuzz/test_specs.py.
# ----------------------------------------------------------------------------------------------
def _identity_residual(model, exc) -> bool:
    """`residual: [dropout]` (or a flatten of one axis): the body returns x itself, and autograd's
    gradient sum for x + x runs outside the add module, so `validate` attributes it to (model)."""
    from costspec.tree.nodes import ResidualNode

    def residuals(node):
        for child in node.children:
            if isinstance(child, ResidualNode):
                yield child
            yield from residuals(child)

    for res in residuals(model.root):
        body = [n for child in res.children[:-1] for n in child.op_nodes()]
        if all(n.op.name in ("dropout", "flatten") and n.out_shape == n.call.in_shape for n in body):
            return True
    return False


KNOWN_BUGS: dict[str, tuple[Callable, str]] = {
    "identity-residual-attribution": (_identity_residual, "test_known_bug_identity_residual_validate"),
}


KNOWN_REJECTIONS: dict[str, tuple[Callable, str]] = {
    # a value saved in a repeat body before its parameters, when nothing before the repeat has any: the first
    # instance's value needs no gradient, the later ones' do (a documented "cannot yet" of the dataflow)
    "save-in-first-gradless-repeat-instance": (lambda message: "cannot yet tell which instances" in message,
                                               "test_known_bug_save_in_first_gradless_repeat_instance"),
}


def known_rejection(message: str) -> str | None:
    """The id of the known bug that makes costspec refuse a valid spec with this message."""
    for bug, (test, _) in KNOWN_REJECTIONS.items():
        if test(message):
            return bug
    return None


def known_bug(model, exc: BaseException | None) -> str | None:
    for bug, (test, _) in KNOWN_BUGS.items():
        try:
            if test(model, exc):
                return bug
        except Exception:  # noqa: BLE001 - a predicate that cannot decide does not match
            continue
    return None


# ----------------------------------------------------------------------------------------------
# Properties
# ----------------------------------------------------------------------------------------------
def _fail(text, message: str) -> AssertionError:
    shown = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    return AssertionError(f"{message}\n--- spec ---\n{shown}")


def _at(expr, values) -> int:
    value = sympy.sympify(expr).xreplace(values)
    assert value.is_Integer, f"{expr} at {values} is {value}, not an integer"
    return int(value)


def check_numbers(model, text, values) -> None:
    """Property 2 at bound dim `values` (raises CostspecError if costspec refuses these values)."""
    sets = {str(s): int(v) for s, v in values.items() if model.dims.dims[str(s)].definition is None}
    reports = {}
    for pass_ in PASSES:
        report = model.evaluate(pass_, **sets)
        cost = model.cost(pass_)
        symbolic = (_at(cost.tc, values), _at(cost.cuda, values), _at(cost.params, values))
        if (report.tc, report.cuda, report.params) != symbolic:
            raise _fail(text, f"{pass_}: evaluate gives (tc, cuda, params) = {(report.tc, report.cuda, report.params)}, "
                              f"the symbolic total substituted gives {symbolic}")
        names = [r.name for r in report.rows]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise _fail(text, f"{pass_}: report rows share names {dup}")
        rows = report.rows
        for i, row in enumerate(rows):
            children = []
            for below in rows[i + 1:]:
                if below.depth <= row.depth:
                    break
                if below.depth == row.depth + 1:
                    children.append(below)
            if children:
                sums = (sum(r.tc_flops for r in children), sum(r.cuda_flops for r in children), sum(r.params for r in children))
                if sums != (row.tc_flops, row.cuda_flops, row.params):
                    raise _fail(text, f"{pass_}: row '{row.name}' has (tc, cuda, params) = "
                                      f"{(row.tc_flops, row.cuda_flops, row.params)}, the rows below it sum to {sums}")
        top = [r for r in report.rows if r.depth == 0]
        sums = (sum(r.tc_flops for r in top), sum(r.cuda_flops for r in top), sum(r.params for r in top))
        if sums != (report.tc, report.cuda, report.params):
            raise _fail(text, f"{pass_}: top-level rows sum to {sums}, totals are {(report.tc, report.cuda, report.params)}")
        reports[pass_] = report
    f, b, t = reports["forward"], reports["backward"], reports["train"]
    if (t.tc, t.cuda, t.params) != (f.tc + b.tc, f.cuda + b.cuda, f.params):
        raise _fail(text, f"train {(t.tc, t.cuda, t.params)} != forward + backward "
                          f"{(f.tc + b.tc, f.cuda + b.cuda, f.params)}")


def check_sweep(model, text) -> None:
    """Property 4: `sweep` over a free dim gives exactly `evaluate`'s integers at every point,
    and refuses the grid (a CostspecError naming a point) exactly when `evaluate` refuses some point."""
    from costspec.analysis.sweep import MAX_VALUE, sweep

    free = [d for d in model.dims.free()]
    if not free:
        return
    dim = next((d for d in free if d.name == "B"), free[0])
    default = int(dim.default)
    values = sorted({default, default + 1, default + 3, max(1, default - 1)})
    if max(values) >= MAX_VALUE:  # beyond a vectorised sweep's documented range (eval takes any size)
        return
    evaluated = {}
    for v in values:
        try:
            evaluated[v] = model.evaluate("forward", **{dim.name: v})
        except CostspecError as exc:
            evaluated[v] = exc
    try:
        _, got = sweep(model, [(dim.name, values)])
    except CostspecError as exc:
        if not any(isinstance(e, CostspecError) for e in evaluated.values()):
            raise _fail(text, f"sweep {dim.name}={values} refused ({exc}) but evaluate accepts every point") from exc
        return
    for i, v in enumerate(values):
        e = evaluated[v]
        if isinstance(e, CostspecError):
            if "too many to print" in str(e):
                continue  # sweep keeps exact Python integers where eval refuses to print 4,000+ digits
            raise _fail(text, f"sweep printed a row at {dim.name}={v} where evaluate refuses: {e}")
        row = (int(got["tc_flops"][i]), int(got["cuda_flops"][i]), int(got["params"][i]))
        if row != (e.tc, e.cuda, e.params):
            raise _fail(text, f"sweep at {dim.name}={v} gives {row}, evaluate gives {(e.tc, e.cuda, e.params)}")


def check_render(model, text) -> None:
    """Property 5: no control or direction-override character reaches a rendered report."""
    from costspec.core.render import render
    from costspec.core.text import unsafe_chars
    from costspec.export.report import eval_result

    result = eval_result(model.evaluate())
    for out in (render(result, "table"), render(result, "markdown"), render(result, "csv")):
        bad = unsafe_chars(out, "\n")
        if bad:
            raise _fail(text, f"rendered report contains control character U+{ord(bad[0]):04X}")


def instances(model) -> int:
    """Op instances of the torch module built at the default dims (repeats unrolled)."""
    values = model.bind()
    return sum(_at(mult, values) for node, _, mult, _ in model.walk() if isinstance(node, OpNode))


def check_meta(model, text) -> bool:
    """Property 3: costspec.runtime.validate on meta, train (forward when the model has no parameters)."""
    from costspec.runtime.validate import render_table, validate

    if instances(model) > MAX_INSTANCES:
        return False
    pass_ = "train" if model.root.makes_grad else "forward"
    result = validate(model, model.bind(), pass_, "meta", 0.0)
    for phase in result.rows:
        total = result.total(phase)
        if total.matmul_reconciled != total.matmul_analytic:
            raise _fail(text, f"{phase}: matmul FLOPs {total.matmul_analytic:,} analytic vs {total.matmul_reconciled:,} measured "
                              f"(reconciled)\n{render_table(result)}")
    if not result.ok:
        raise _fail(text, "costspec validate fails\n" + render_table(result))
    return True


def check_spec(text: str | bytes, meta: bool = False, tolerate_known: bool = True) -> Outcome:
    """Load `text` and check every property; `meta`: also validate on the meta device."""
    out = Outcome()
    try:
        model = costspec.loads(text)
    except CostspecError as exc:
        out.error = str(exc)
        bug = known_rejection(out.error) if tolerate_known else None
        if bug:
            out.known.append(bug)  # counted; only meaningful when the spec is known to be valid
        return out
    except Exception as exc:  # noqa: BLE001 - the loader must only raise CostspecError
        from .specgen import known_loader_crash

        bug = known_loader_crash(exc) if tolerate_known else None
        if bug is None:
            raise
        out.known.append(bug)
        out.error = f"{type(exc).__name__}: {exc}"
        return out
    out.accepted = True
    try:
        _tolerant(out, model, tolerate_known, check_numbers, model, text, model.bind())
        if "B" in model.dims.dims and model.dims.dims["B"].definition is None:
            try:
                values = model.bind(sets={"B": int(model.dims.dims["B"].default) + 3})
            except CostspecError:
                values = None
            if values is not None:
                _tolerant(out, model, tolerate_known, check_numbers, model, text, values)
        _tolerant(out, model, tolerate_known, check_render, model, text)
        _tolerant(out, model, tolerate_known, check_sweep, model, text)
    except CostspecError:
        return out  # refusing some dim values, or a cost that is not an integer, with a clear error is allowed
    if meta:
        try:
            out.validated = bool(_tolerant(out, model, tolerate_known, check_meta, model, text))
        except CostspecError:
            pass  # e.g. a layer name that clashes with an nn.Module attribute: a clear error
    return out


def _tolerant(out: Outcome, model, tolerate: bool, check, *args):
    """Run one check; a failure that matches a known bug is recorded in `out` instead of raised."""
    try:
        return check(*args)
    except CostspecError:
        raise
    except Exception as exc:  # noqa: BLE001 - a crash or a mismatch: a bug, unless a known one
        bug = known_bug(model, exc) if tolerate else None
        if bug is None:
            raise
        out.known.append(bug)
        return None


def _totals(model, pass_: str) -> tuple[int, int, int]:
    if model is None:
        return (0, 0, 0)
    report = model.evaluate(pass_)
    return report.tc, report.cuda, report.params


def check_repeat(case, meta: bool = False) -> Outcome:
    """repeat-k = k x the body: for the same prefix and body, cost(k) - cost(prefix) equals
    (k - n) x (cost(once) - cost(prefix)) + sum over variants of n_v x (cost(once with the
    variant's args) - cost(prefix)). Forward and params always; backward and train when the
    repeat's input needs a gradient (otherwise the first instance has no dX, by design)."""
    from .specgen import dump

    texts = {"once": dump(case.once), "k": dump(case.k_times)}
    try:
        once, k_times = costspec.loads(texts["once"]), costspec.loads(texts["k"])
        prefix = costspec.loads(dump(case.prefix_only)) if case.prefix_only else None
        variants = [(n, costspec.loads(dump(spec))) for n, spec in case.variants]
    except CostspecError as exc:  # these specs are valid: refusing one is a bug, unless a known one
        bug = known_rejection(str(exc))
        if bug is None:
            raise AssertionError(f"a valid spec was rejected: {exc}\n--- spec ---\n{texts['k']}") from exc
        return Outcome(error=str(exc), known=[bug])
    grad = prefix is not None and prefix.root.makes_grad
    rest = case.k - sum(n for n, _ in variants)
    for pass_ in PASSES:
        f0, f1, fk = _totals(prefix, pass_), _totals(once, pass_), _totals(k_times, pass_)
        expected = [rest * (b - a) for a, b in zip(f0, f1)]
        for n, model in variants:
            expected = [e + n * (v - a) for e, v, a in zip(expected, _totals(model, pass_), f0)]
        got = [b - a for a, b in zip(f0, fk)]
        checked = (0, 1, 2) if pass_ == "forward" or grad else (2,)
        for i in checked:
            if got[i] != expected[i]:
                what = ("tc", "cuda", "params")[i]
                raise _fail(texts["k"], f"{pass_} {what}: repeat {case.k} adds {got[i]:,} over the prefix, "
                                        f"{case.k} x the body (with its variants) is {expected[i]:,}\n"
                                        f"--- once ---\n{texts['once']}")
    return check_spec(texts["k"], meta)  # and every other property, on the repeated spec
