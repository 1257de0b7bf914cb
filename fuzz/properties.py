"""The properties every spec must have, checked on one spec text at a time.

1. Loading either returns a Model or raises a `costspec.errors.CostspecError`; never another
   exception.
2. For an accepted spec, at the default dims and at a second batch size:
   * `Model.evaluate(pass_)` totals equal `Model.cost(pass_)` with the dims substituted
     (`xreplace(Model.bind())`), for forward, backward and train;
   * train = forward + backward (Tensor-Core and CUDA-core FLOPs; params as forward);
   * report rows have unique names, and the top-level rows sum to the totals.
3. (sampled) The torch module built from the spec, run on `meta`, has matmul-class FLOPs equal
   to FlopCounterMode's with 0 relative error, and the same pointwise kinds and element
   counts (`costspec.validate`, every named reconciliation applied).

`check_spec` raises AssertionError (with the spec text) when a property fails; exceptions
other than CostspecError propagate. Failures that match a known, reported bug (`KNOWN_BUGS`,
each with a strict-xfail reproducer in tests/test_fuzz.py) are returned as such instead, so a
fuzz run keeps going and counts them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import sympy

import costspec
from costspec.errors import CostspecError
from costspec.tree import OpNode

PASSES = ("forward", "backward", "train")
MAX_INSTANCES = 400  # op instances in the torch module (repeats unrolled) for the meta check


@dataclass
class Outcome:
    accepted: bool = False
    error: str = ""  # the CostspecError of a rejected spec
    validated: bool = False
    known: list[str] = field(default_factory=list)  # ids of known bugs this spec hit


# ----------------------------------------------------------------------------------------------
# Known bugs: (id, test(model, exc) -> bool). Each has a strict-xfail reproducer in tests/test_fuzz.py.
# ----------------------------------------------------------------------------------------------
def _softmax_axis(model, exc) -> bool:
    """softmax's axis is not checked against the input rank (flatten / transpose check theirs)."""
    return any(n.op.name == "softmax" and not -len(n.call.in_shape) <= n.call.attrs.axis < len(n.call.in_shape)
               for n in model.op_nodes())


def _identity_residual(model, exc) -> bool:
    """`residual: [dropout]` (or a flatten of one axis): the body returns x itself, and autograd's
    gradient sum for x + x runs outside the add module, so `validate` attributes it to (model)."""
    from costspec.tree import ResidualNode

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


def _gradless_repeat_rows(model, exc) -> bool:
    """Rows inside a repeat whose input needs no gradient and whose body has no parameters: the row
    walk (`model.node_cost`) charges instances 2..k with input gradients (dX, activation backward)
    that the repeat's own row, the total and torch do not have; a variant group with 0 instances
    gets a negative backward row."""
    from costspec.tree import RepeatNode

    return any(isinstance(node, RepeatNode) and not in_rg and not node.makes_grad for node, _, _, in_rg in model.walk())


def _empty_variant_group(model, exc) -> bool:
    """Variants covering every index of a symbolic repeat count leave an `others` group with 0
    instances at the bound dims; validate still applies its first instance's reconciliations once."""
    from costspec.tree import RepeatNode

    values = model.bind()
    return any(isinstance(node, RepeatNode) and any(sympy.sympify(g.count).xreplace(values) == 0 for g in node.children)
               for node, _, _, _ in model.walk())


def _size_beyond_int64(model, exc) -> bool:
    """A size (a tensor's element count, an attribute, a weight) of 2**63 or more: torch cannot make the tensor, and validate
    stops with torch's TypeError (an internal error) instead of saying the sizes are too large for it."""
    values = model.bind()

    def big(expr) -> bool:
        value = sympy.sympify(expr).xreplace(values)
        return value.is_number and abs(value) >= 2**63

    for node in model.op_nodes():
        for shape in (node.call.in_shape, node.out_shape):
            total = sympy.Integer(1)
            for d in shape:
                total *= sympy.sympify(d)
            if big(total):
                return True
        attrs = [v for _, v in node.call.attrs.items() if isinstance(v, sympy.Basic)]
        if any(big(v) for v in attrs) or big(node.params):  # e.g. an mlp's hidden width
            return True
    return False


def _zero_size_modulo(model, exc) -> bool:
    """A size expression that is 0 at the bound dims (heads: B // 5 at B = 4) reaches a divisibility
    constraint, Mod(dim, 0): sympy's ZeroDivisionError escapes instead of a SpecError."""
    return isinstance(exc, ZeroDivisionError)


def _take_token_index(model, exc) -> bool:
    """take_token checks its index only when the token count is a number: with S = B // 2 symbolic,
    an index out of range at the bound dims is accepted and torch's IndexError follows."""
    values = model.bind()
    for node in model.op_nodes():
        if node.op.name == "take_token":
            s = int(sympy.sympify(node.call.in_shape[1]).xreplace(values))
            if not -s <= node.call.attrs.index < s:
                return True
    return False


KNOWN_BUGS: dict[str, tuple[Callable, str]] = {
    "softmax-axis-unchecked": (_softmax_axis, "test_known_bug_softmax_axis_out_of_range_accepted"),
    "identity-residual-attribution": (_identity_residual, "test_known_bug_identity_residual_validate"),
    "gradless-repeat-rows": (_gradless_repeat_rows, "test_known_bug_rows_of_gradless_repeat"),
    "empty-variant-group": (_empty_variant_group, "test_known_bug_validate_empty_variant_group"),
    "size-beyond-int64": (_size_beyond_int64, "test_known_bug_validate_size_beyond_int64"),
    "zero-size-modulo": (_zero_size_modulo, "test_known_bug_zero_size_at_bound_dims_crashes"),
    "take-token-index-unchecked": (_take_token_index, "test_known_bug_take_token_index_unchecked_for_symbolic_tokens"),
}


def _position_embedding_rank(exc) -> bool:
    """position_embedding's `length` default reads shape[1] before the rank check: an IndexError on a
    rank-1 input instead of a SpecError."""
    import traceback

    return isinstance(exc, IndexError) and any(
        f.filename.endswith("embed.py") and "shape[1]" in (f.line or "") for f in traceback.extract_tb(exc.__traceback__))


KNOWN_LOADER_CRASHES: dict[str, tuple[Callable, str]] = {
    "yaml-unicode-escape": (lambda exc: isinstance(exc, ValueError) and "chr() arg" in str(exc),
                            "test_known_bug_yaml_escape_beyond_unicode_crashes"),
    "zero-size-modulo": (lambda exc: isinstance(exc, ZeroDivisionError), "test_known_bug_zero_size_at_bound_dims_crashes"),
    "position-embedding-rank": (_position_embedding_rank, "test_known_bug_position_embedding_rank_1_crashes"),
}


def _split_top(text: str) -> list[str]:
    """Items of a printed shape list, splitting on commas outside parentheses."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "([" and 1 or (-1 if ch in ")]" else 0)
        if ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    return items + [text[start:].strip()]


def _fraction_then_floor(message: str) -> bool:
    """A reshape's -1 is inferred as elements / known sizes, a true division (H/2) that sympy does not
    know to be an integer; a later conv computes floor(H/2 - ...) + 1, which then does not simplify
    back, and a shape-keeping body is refused ('from [.., H/2] to [.., floor(H/2)]')."""
    import re

    m = re.search(r"(?:from|shape) \[(.*)\],? (?:to|it gives) \[(.*)\]", message)
    if not m:
        return False
    return any("/" in x and f"floor({x})" in m[2] for x in _split_top(m[1]))


KNOWN_REJECTIONS: dict[str, tuple[Callable, str]] = {
    "reshape-infers-a-fraction": (_fraction_then_floor, "test_known_bug_reshape_inferred_size_is_a_fraction"),
    # Dims.canonical writes a free dim B as sqrt(T) when a derived T = B*B exists; floor(sqrt(T)) then
    # does not simplify, and a shape-keeping body (same-padding conv, a restore to the same size) is refused.
    "derived-dim-rewrites-free-dim": (lambda message: "sqrt(" in message,
                                      "test_known_bug_derived_dim_square_refuses_a_shape_keeping_body"),
}


def known_rejection(message: str) -> str | None:
    """The id of the known bug that makes costspec refuse a valid spec with this message."""
    for bug, (test, _) in KNOWN_REJECTIONS.items():
        if test(message):
            return bug
    return None


def known_loader_crash(exc: BaseException) -> str | None:
    """The id of the known bug a loader crash (an exception other than CostspecError) matches."""
    for bug, (test, _) in KNOWN_LOADER_CRASHES.items():
        if test(exc):
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
                sums = (sum(r.tc for r in children), sum(r.cuda for r in children), sum(r.params for r in children))
                if sums != (row.tc, row.cuda, row.params):
                    raise _fail(text, f"{pass_}: row '{row.name}' has (tc, cuda, params) = "
                                      f"{(row.tc, row.cuda, row.params)}, the rows below it sum to {sums}")
        top = [r for r in report.rows if r.depth == 0]
        sums = (sum(r.tc for r in top), sum(r.cuda for r in top), sum(r.params for r in top))
        if sums != (report.tc, report.cuda, report.params):
            raise _fail(text, f"{pass_}: top-level rows sum to {sums}, totals are {(report.tc, report.cuda, report.params)}")
        reports[pass_] = report
    f, b, t = reports["forward"], reports["backward"], reports["train"]
    if (t.tc, t.cuda, t.params) != (f.tc + b.tc, f.cuda + b.cuda, f.params):
        raise _fail(text, f"train {(t.tc, t.cuda, t.params)} != forward + backward "
                          f"{(f.tc + b.tc, f.cuda + b.cuda, f.params)}")


def instances(model) -> int:
    """Op instances of the torch module built at the default dims (repeats unrolled)."""
    values = model.bind()
    return sum(_at(mult, values) for node, _, mult, _ in model.walk() if isinstance(node, OpNode))


def check_meta(model, text) -> bool:
    """Property 3: costspec.validate on meta, train (forward when the model has no parameters)."""
    from costspec.validate import render_table, validate

    if instances(model) > MAX_INSTANCES:
        return False
    pass_ = "train" if model.root.makes_grad else "forward"
    result = validate(model, model.bind(), pass_, "meta", 0.0)
    for phase in result.rows:
        total = result.total(phase)
        if total.reconciled != total.analytic:
            raise _fail(text, f"{phase}: matmul FLOPs {total.analytic:,} analytic vs {total.reconciled:,} measured "
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
