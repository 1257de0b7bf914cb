"""Block arguments are expressions in the scope of the use that writes them, at every depth: nested
blocks (plain uses, repeats, `at:` variants) evaluate exactly like the same model written out by hand."""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import costspec

CLASH = textwrap.dedent("""\
    costspec: 1
    name: clash
    dims: {B: 2}
    input: [B, 8]
    blocks:
      inner:
        params: {k: 1}
        layers:
          - linear: {out: k}
      middle:
        params: {w: 1, k: 1}
        layers:
          - block: inner
            args: {k: w}
      outer:
        params: {k: 1}
        layers:
          - block: middle
            args: {w: 2*k, k: 3}
    layers:
      - block: outer
        args: {k: 16}
    """)
# the same chain without the name clash: `k` is no name in middle's scope, and needs not be
NO_CLASH = textwrap.dedent("""\
    costspec: 1
    name: no_clash
    dims: {B: 2}
    input: [B, 8]
    blocks:
      inner:
        params: {j: 1}
        layers:
          - linear: {out: j}
      middle:
        params: {w: 1}
        layers:
          - block: inner
            args: {j: w}
      outer:
        params: {k: 1}
        layers:
          - block: middle
            args: {w: 2*k}
    layers:
      - block: outer
        args: {k: 16}
    """)


def _inner_linear(model):
    (node,) = [n for n in model.op_nodes() if n.op.name == "linear"]
    return node


def test_a_nested_argument_is_read_in_the_scope_of_the_use_that_writes_it():
    # outer(k=16) -> middle(w = 2*k = 32, k = 3) -> inner(k = w = 32): out 32, not middle's k = 3 doubled
    for text in (CLASH, NO_CLASH):
        model = costspec.loads(text)
        assert _inner_linear(model).call.attrs.out == 32
        report = model.evaluate("forward")
        assert report.params == 8 * 32 + 32 == 288
        assert report.tc == 2 * 2 * 8 * 32  # B x K x N multiply-adds
        assert report.cuda == 2 * 32  # the bias add


def test_the_cli_checks_and_evaluates_both_chains(tmp_path):
    for text in (CLASH, NO_CLASH):
        path = tmp_path / "spec.yaml"
        path.write_text(text)
        check = subprocess.run([sys.executable, "-m", "costspec", "check", str(path)], capture_output=True, text=True)
        assert check.returncode == 0 and check.stdout.strip().endswith(": ok"), check.stdout + check.stderr
        out = subprocess.run([sys.executable, "-m", "costspec", "eval", str(path), "--format", "json"],
                             capture_output=True, text=True, check=True)
        assert '"params": 288' in out.stdout


def test_the_generated_module_has_the_right_width_and_validates():
    import pytest

    torch = pytest.importorskip("torch")
    from costspec.runtime.validate import render_table, validate

    for text in (CLASH, NO_CLASH):
        model = costspec.loads(text)
        module, _ = model.to_torch()
        linears = [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
        assert [tuple(m.weight.shape) for m in linears] == [(32, 8)]
        assert sum(p.numel() for p in module.parameters()) == 288
        result = validate(model, model.bind(), "train", "meta")
        assert result.ok, render_table(result)


# --- property: random nestings evaluate like the blocks written out by hand ------------------------------

DIMS = {"C": 4, "D": 3, "E": 2}  # free dims (B = 2 too); C is the width; D is also a parameter name, so
# a parameter can shadow it
NUMERIC = ("k", "w", "D")  # few names, so that the blocks' parameters clash
ACTS = ("relu", "gelu", "silu", "tanh")


@dataclass
class Use:
    """One use of a block: the arguments written at it, and whether it is a repeat (count, variant args)."""

    args: dict[str, str]
    repeat: str | None = None
    variant_args: dict[str, str] | None = None


@dataclass
class Block:
    params: dict[str, str]  # name -> default (in the dims' scope)
    out: str  # the first linear's width, in the block's scope
    inner: Use | None = None  # the use of the next block, if any


def _expr(draw, names: list[str], depth: int = 0) -> str:
    """A positive integer expression of `names` and small numbers."""
    if depth >= 2 or draw(st.booleans()):
        return draw(st.sampled_from(names)) if names and draw(st.integers(0, 3)) else str(draw(st.integers(1, 3)))
    a, b = _expr(draw, names, depth + 1), _expr(draw, names, depth + 1)
    return f"({a} {draw(st.sampled_from(['+', '*']))} {b})"


def _args(draw, params: list[str], caller: list[str], caller_choice: bool) -> dict[str, str]:
    """Arguments for some of `params`, written in the caller's scope (its parameters and the dims): a bare
    name of the caller's (the path that re-read the caller's text), or an expression; `act` and `bias`
    given as a literal or passed through by name."""
    args: dict[str, str] = {}
    for p in params:
        if not draw(st.booleans()):
            continue
        if p == "act":
            args[p] = draw(st.sampled_from(ACTS + (("act",) if caller_choice else ())))
        elif p == "bias":
            args[p] = draw(st.sampled_from((True, False) + (("bias",) if caller_choice else ())))
        elif draw(st.booleans()):
            args[p] = draw(st.sampled_from(caller))
        else:
            args[p] = _expr(draw, caller)
    return args


@st.composite
def nestings(draw):
    depth = draw(st.integers(1, 4))
    blocks: list[Block] = []
    for _ in range(depth):
        names = draw(st.lists(st.sampled_from(NUMERIC), min_size=2, max_size=3, unique=True))
        params = {n: _expr(draw, list(DIMS)) for n in names}
        params["act"] = draw(st.sampled_from(ACTS))
        params["bias"] = draw(st.booleans())
        visible = sorted(set(names) | set(DIMS))
        blocks.append(Block(params, _expr(draw, visible)))
    uses = []
    for i in range(depth):
        caller = sorted(set(DIMS) | (set(n for n in blocks[i - 1].params if n in NUMERIC) if i else set()))
        params = list(blocks[i].params)
        use = Use(_args(draw, params, caller, i > 0))
        if draw(st.booleans()):
            use.repeat = _expr(draw, caller)
            if draw(st.booleans()):
                use.variant_args = _args(draw, params, caller, i > 0)
        uses.append(use)
    for i in range(depth - 1):
        blocks[i].inner = uses[i + 1]
    return blocks, uses[0]


def _substitute(text, scope: dict[str, str]) -> str:
    """`text` (a value written in a scope) with every name replaced by its value there, written in the dims."""
    if not isinstance(text, str):
        return text
    if text in scope and not isinstance(scope[text], str):  # a bool passed through
        return scope[text]
    return re.sub(r"[A-Za-z_]\w*", lambda m: str(scope.get(m.group(0), m.group(0))), text)


def _bind(block: Block, args: dict, caller: dict[str, object]) -> dict[str, object]:
    """The block's scope (dims and parameters, values written in the dims), given args written in `caller`."""
    scope: dict[str, object] = {d: d for d in DIMS}
    for p, default in block.params.items():
        scope[p] = _wrap(_substitute(args[p], caller)) if p in args else _wrap(default)
    return scope


def _wrap(value):
    return f"({value})" if isinstance(value, str) and value not in ACTS else value


def _value(expr: str) -> int:
    return eval(expr, {}, dict(DIMS))  # noqa: S307 - our own generated arithmetic


def _nested_yaml(blocks: list[Block], top: Use) -> str:
    lines = ["costspec: 1", "name: nested", "dims: {B: 2, " + ", ".join(f"{d}: {v}" for d, v in DIMS.items()) + "}", "input: [B, C]",
             "blocks:"]
    for i, block in enumerate(blocks):
        lines += [f"  b{i}:", f"    params: {_flow(block.params)}", "    layers:",
                  f"      - linear: {{out: '{block.out}', bias: bias}}", "      - activation: {fn: act}"]
        lines.append("      - linear: {out: C}")  # the width C again, so a repeat of the block keeps its shape
        if block.inner is not None:
            lines += ["      " + row for row in _use_yaml(f"b{i + 1}", block.inner)]
    lines.append("layers:")
    lines += ["  " + row for row in _use_yaml("b0", top)]
    return "\n".join(lines) + "\n"


def _use_yaml(name: str, use: Use) -> list[str]:
    if use.repeat is None:
        return [f"- block: {name}", f"  args: {_flow(use.args)}"]
    rows = [f"- repeat: '{use.repeat}'", f"  body: {name}", f"  args: {_flow(use.args)}"]
    if use.variant_args is not None:
        rows += ["  at:", f"    - {{indices: [0], args: {_flow(use.variant_args)}}}"]
    return rows


def _flow(mapping: dict) -> str:
    def show(v):
        return str(v).lower() if isinstance(v, bool) else f"'{v}'"
    return "{" + ", ".join(f"{k}: {show(v)}" for k, v in mapping.items()) + "}"


def _flat_yaml(blocks: list[Block], top: Use) -> str:
    lines = ["costspec: 1", "name: flat", "dims: {B: 2, " + ", ".join(f"{d}: {v}" for d, v in DIMS.items()) + "}", "input: [B, C]",
             "layers:"]
    lines += ["  " + row for row in _flat_use(blocks, 0, top, {d: d for d in DIMS})]
    return "\n".join(lines) + "\n"


def _flat_use(blocks: list[Block], i: int, use: Use, caller: dict) -> list[str]:
    """The layers of block i at `use` (arguments written in `caller`), written out with every value in the dims."""
    if use.repeat is None:
        return ["- sequence:"] + ["    " + row for row in _flat_body(blocks, i, _bind(blocks[i], use.args, caller))]
    count = _substitute(use.repeat, caller)
    rows: list[str] = []
    groups = [(count, use.args)]
    if use.variant_args is not None and _value(count) >= 2:
        groups = [(f"{_wrap(count)} - 1", use.args), ("1", {**use.args, **use.variant_args})]
    elif use.variant_args is not None:  # a variant at index 0 of a single instance: it is the only one
        groups = [(count, {**use.args, **use.variant_args})]
    for times, args in groups:
        rows += [f"- repeat: '{times}'", "  body:"]
        rows += ["    " + row for row in _flat_body(blocks, i, _bind(blocks[i], args, caller))]
    return rows


def _flat_body(blocks: list[Block], i: int, scope: dict) -> list[str]:
    block = blocks[i]
    bias = scope["bias"]
    rows = [f"- linear: {{out: '{_substitute(block.out, scope)}', bias: {str(bias).lower()}}}",
            f"- activation: {{fn: {scope['act']}}}"]
    rows.append("- linear: {out: C}")
    if block.inner is not None:
        rows += _flat_use(blocks, i + 1, block.inner, scope)
    return rows


def _totals(text: str) -> tuple[int, int, int]:
    report = costspec.loads(text).evaluate("forward")
    return report.tc, report.cuda, report.params


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nestings())
def test_nested_blocks_evaluate_like_the_blocks_written_out(case):
    blocks, top = case
    nested, flat = _nested_yaml(blocks, top), _flat_yaml(blocks, top)
    assert _totals(nested) == _totals(flat), nested + "\n---\n" + flat
