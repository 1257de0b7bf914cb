"""Hypothesis strategies for costspec specs, and the properties every accepted spec must have.

* `valid_specs()` draws VALID specs: random compositions of the registered ops
  (`costspec.ops.spec_ops()`) with attributes that are valid for the shapes they receive,
  free and derived dims, residuals, named sequences, repeats (with and without `at:`
  variants), blocks with parameters, per-layer precision and cost-table overrides, and the
  dataflow (`FLOWS`): `parallel` with 2-3 branches joined by add / mul (broadcasting keepdim
  means) / concat on an axis, residuals whose `shortcut` changes the shape as the body does,
  values `save:`d and read by `with:` / `input:` / `kv:` (inside repeat bodies too, and across
  them), further `inputs:` read by `input:` and by cross-attention; never a dead value. Every
  size is tracked twice: as the expression written in the spec and as its value at the dim
  defaults, so divisibility (heads | C, groups | channels, patch | image) holds and shape-keeping
  bodies (residuals, repeats) are symbolically shape-keeping.
* `mutated_specs()` draws a valid spec and breaks it: keys deleted, replaced, added or
  duplicated, wrong types, random and hostile expression strings, renamed references
  (unknown dims and blocks, cycles), swapped ops, duplicate names, byte-level edits of the
  YAML text, and broken dataflow (`flow_mutate`: unknown or dropped value names, a save twice,
  `input:` on the first layer of a branch / body, joins of shapes that differ, kv to a rank-2
  value, dead values).
* `check_spec()` runs the properties on one spec text and says what happened.

Ops registered after this file was written are drawn too: a generic generator fills their
required attributes from the `Attr` kinds and probes the op on the current shape (a one-layer
spec); an op it cannot place is simply not drawn there.

Used by tests/fuzz/test_specs.py (bounded, CI) and fuzz/run_fuzz.py (long runs).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

import sympy
import yaml
from hypothesis import strategies as st

import costspec
from costspec.core.cost_table import default_table
from costspec.core.errors import CostspecError
from costspec.ops import spec_ops
from costspec.ops.attrs import REQUIRED
from costspec.ops.opdef import MAX_RANK
from costspec.ops.pointwise import ACTIVATIONS

ACTS = tuple(ACTIVATIONS)
DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")
MAX_VALUE = 48  # sizes stay small: the meta-device check builds every repeat instance
MAX_OPS = 14  # op layers per spec (blocks counted once per use)
# Block parameters standing for bool / choice attributes (`bias: p`, `fn: act`): the tree builder
# supports them, but the schema refuses a string where a boolean or an enum value is expected
# (known bug, tests/fuzz/test_specs.py::test_known_bug_block_param_for_bool_attribute). Off until fixed.
PASS_THROUGH = False
FREE_POOL = ("C", "D", "H", "W", "S", "E", "K", "G")
DERIVED_POOL = ("C2", "T", "HID", "Q")


# ----------------------------------------------------------------------------------------------
# Sizes: (expression as written in the spec, value at the defaults)
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Size:
    expr: Any  # int or str
    value: int
    exact: bool = True  # False: costspec holds some other expression of this value (after a generic op)

    def paren(self) -> str:
        return str(self.expr) if isinstance(self.expr, int) or self.expr.isidentifier() else f"({self.expr})"


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass
class Gen:
    """State of one spec being drawn."""

    draw: Callable
    dims: dict[str, int] = field(default_factory=dict)  # every dim -> value at defaults
    raw_dims: dict = field(default_factory=dict)  # the spec's `dims:` as written
    blocks: dict[str, Any] = field(default_factory=dict)
    ops: int = 0
    names: int = 0
    depth: int = 0
    params: list | None = None  # while drawing a block body: [(name, kind, domain, default)]
    generic_ops: bool = True
    values: list = field(default_factory=list)  # named values readable here: [(name, shape)]
    inputs: dict = field(default_factory=dict)  # further model inputs (`inputs:`): name -> shape
    nvalues: int = 0

    # -- small draws ----------------------------------------------------------------------------
    def flag(self, p: float = 0.5) -> bool:
        return self.draw(st.floats(0, 1)) < p

    def pick(self, seq):
        return self.draw(st.sampled_from(list(seq)))

    def num(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def name(self) -> str:
        self.names += 1
        return self.pick(("l", "enc", "mix", "proj_", "stage")) + str(self.names)

    # -- sizes --------------------------------------------------------------------------------
    def size(self, lo: int = 1, hi: int = 8) -> Size:
        """Any size in [lo, hi] (at the defaults): a literal, a dim, an expression of dims, or (in a
        block body) a size parameter of the block, whose arguments may then be any positive size."""
        if self.params is not None and self.flag(0.3):
            return self.param_size()
        return self.term_for(self.num(lo, hi))

    def term_for(self, value: int) -> Size:
        """An expression whose value at the defaults is exactly `value`."""
        options: list[Size] = [Size(value, value)]
        for name, v in self.dims.items():
            if v == value:
                options += [Size(name, value)] * 2
            elif value % v == 0:
                options.append(Size(f"{value // v}*{name}", value))
            elif v < value:
                options.append(Size(f"{name} + {value - v}", value))
            elif v // max(1, v // value) == value and v // value > 1:
                options.append(Size(f"{name} // {v // value}", value))
            if v > value:
                options.append(Size(f"min({name}, {value})", value))
            if v < value:
                options.append(Size(f"max({name}, {value})", value))
        return self.pick(options)

    def param_size(self) -> Size:
        name = f"p{len(self.params)}"
        domain = tuple(range(1, 7))
        default = self.pick(domain)
        self.params.append((name, "size", domain, default))
        return Size(name, default) if self.flag() else Size(f"2*{name}", 2 * default)

    def param_choice(self, kind: str, domain: tuple, value):
        """In a block: a parameter standing for a bool / choice attribute, else the value itself."""
        if not PASS_THROUGH or self.params is None or not self.flag(0.4):
            return value
        name = f"p{len(self.params)}"
        self.params.append((name, kind, domain, value))
        return name


# ----------------------------------------------------------------------------------------------
# Op generators: (gen, shape) -> (attrs, new shape) or None when the op does not fit the shape
# ----------------------------------------------------------------------------------------------
def _maybe(g: Gen, attrs: dict, key: str, value, p: float = 0.5) -> None:
    if g.flag(p):
        attrs[key] = value


def g_linear(g: Gen, shape):
    if not 1 <= len(shape) <= 6:
        return None
    out = g.size()
    attrs = {"out": out.expr}
    _maybe(g, attrs, "bias", g.param_choice("bool", (True, False), g.flag()))
    if shape[-1].exact:
        _maybe(g, attrs, "in", shape[-1].expr, 0.2)
    return attrs, shape[:-1] + [out]


def g_mlp(g: Gen, shape):
    if not 2 <= len(shape) <= 4:
        return None
    attrs = {"hidden": g.size().expr}
    out = shape[-1]
    if g.flag(0.3):
        out = g.size()
        attrs["out"] = out.expr
    _maybe(g, attrs, "fn", g.param_choice("choice", ACTS, g.pick(ACTS)))
    _maybe(g, attrs, "bias", g.param_choice("bool", (True, False), g.flag()))
    return attrs, shape[:-1] + [out]


def _attrs_of(op: str) -> set[str]:
    return {a.name for a in spec_ops()[op].attrs} if op in spec_ops() else set()


def g_attention(g: Gen, shape):
    if len(shape) != 3:
        return None
    have = _attrs_of("attention")
    c, s = shape[2].value, shape[1].value
    heads = g.pick(divisors(c))
    attrs = {"heads": g.term_for(heads).expr}
    if shape[2].exact:
        _maybe(g, attrs, "dim", shape[2].expr, 0.2)
    head_dim = c // heads
    if g.flag(0.3):
        head = g.size(1, 6)
        attrs["head_dim"] = head.expr
        head_dim = head.value if not isinstance(head.expr, str) or not head.expr.startswith(("p", "2*p")) else 1
    for key in ("qkv_bias", "proj_bias", "fused_qkv"):
        _maybe(g, attrs, key, g.param_choice("bool", (True, False), g.flag()), 0.3)
    _maybe(g, attrs, "backend", g.param_choice("choice", ("flash", "math"), g.pick(("flash", "math"))), 0.4)
    # attributes added later (GQA, causal, rope, windows, relative positions): drawn when registered
    if "kv_heads" in have and heads > 1 and g.flag(0.25):
        attrs["kv_heads"] = g.pick([d for d in divisors(heads) if d < heads])
    if "rope" in have and head_dim % 2 == 0 and "head_dim" not in attrs and g.flag(0.2):
        attrs["rope"] = True
    spatial = {"grid", "window", "rel_pos"} <= have and g.flag(0.25)
    if spatial:
        gh = g.pick(divisors(s))
        attrs["grid"] = [gh, s // gh]
        if g.flag(0.6):  # a window beyond a grid side of 1 is refused (SAM's 2-D window misused as 1-D)
            attrs["window"] = g.num(1, max(gh, s // gh) if min(gh, s // gh) > 1 else 1)
        if g.flag(0.5):
            attrs["rel_pos"] = True
    if "causal" in have and not attrs.get("rel_pos") and g.flag(0.25):
        attrs["causal"] = True
        if "causal_flops" in have and g.flag():
            attrs["causal_flops"] = g.pick(("executed", "useful"))
    return attrs, shape


def _conv_out(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _conv_out_expr(size: Size, k: int, s: int, p: int, d: int) -> Size:
    value = _conv_out(size.value, k, s, p, d)
    if (k, s, p, d) == (1, 1, 0, 1):
        return size
    if not size.exact:
        return Size(value, value, False)
    off = 2 * p - d * (k - 1) - 1
    return Size(f"({size.paren()} + {off})//{s} + 1" if off >= 0 else f"({size.paren()} - {-off})//{s} + 1", value)


def g_conv2d(g: Gen, shape):
    if len(shape) != 4:
        return None
    b, cin, h, w = shape
    groups = g.pick(divisors(cin.value))
    out_value = groups * g.num(1, max(1, 8 // groups))
    out = g.term_for(out_value).expr
    k = [g.num(1, 3), g.num(1, 3)]
    s, p, d = g.num(1, 2), g.num(0, 1), g.num(1, 2)
    if _conv_out(h.value, k[0], s, p, d) < 1 or _conv_out(w.value, k[1], s, p, d) < 1:
        k, s, p, d = [1, 1], 1, 0, 1
    attrs: dict = {"out": out, "kernel": k if k[0] != k[1] or g.flag() else k[0]}
    for key, value, default in (("stride", s, 1), ("padding", p, 0), ("dilation", d, 1)):
        if value != default or g.flag(0.2):
            attrs[key] = value
    if groups != 1 or g.flag(0.2):
        attrs["groups"] = g.term_for(groups).expr
    _maybe(g, attrs, "bias", g.param_choice("bool", (True, False), g.flag()), 0.3)
    new = [b, Size(out, out_value), _conv_out_expr(h, k[0], s, p, d), _conv_out_expr(w, k[1], s, p, d)]
    return attrs, new


def g_conv_same(g: Gen, shape):
    """A shape-keeping conv (stride 1, 'same' padding, out = in channels)."""
    if len(shape) != 4 or not shape[1].exact:
        return None
    k = g.pick((1, 3))
    attrs = {"out": shape[1].expr, "kernel": k, "padding": (k - 1) // 2}
    _maybe(g, attrs, "bias", g.flag(), 0.3)
    return attrs, shape


def g_patch_embed(g: Gen, shape):
    if len(shape) != 4:
        return None
    b, _, h, w = shape
    p = g.pick([d for d in divisors(h.value) if w.value % d == 0])
    patch = g.term_for(p).expr
    dim = g.size()
    attrs = {"patch": patch, "dim": dim.expr}
    cls = g.flag()
    if cls or g.flag(0.3):
        attrs["cls_token"] = cls
    _maybe(g, attrs, "pos_embed", g.flag())
    _maybe(g, attrs, "bias", g.flag(), 0.3)
    pp = f"({patch})" if isinstance(patch, str) else str(patch)
    grid = f"({h.paren()}//{pp})*({w.paren()}//{pp})" + (" + 1" if cls else "")
    return attrs, [b, Size(grid, (h.value // p) * (w.value // p) + cls, h.exact and w.exact), dim]


def _norm(rank_ok):
    def gen(g: Gen, shape):
        if not rank_ok(len(shape)):
            return None
        attrs: dict = {}
        _maybe(g, attrs, "eps", g.pick((1e-5, 1e-6, 0.001)), 0.2)
        _maybe(g, attrs, "affine", g.flag(0.8), 0.2)
        return attrs, shape

    return gen


def g_layernorm(g: Gen, shape):
    out = _norm(lambda r: r >= 1)(g, shape)
    if out and g.flag(0.2):
        out[0]["bias"] = g.param_choice("bool", (True, False), g.flag())
    return out


def g_activation(g: Gen, shape):
    return {"fn": g.param_choice("choice", ACTS, g.pick(ACTS))}, shape


def g_softmax(g: Gen, shape):
    attrs: dict = {}
    _maybe(g, attrs, "axis", g.num(-len(shape), len(shape) - 1))
    return attrs, shape


def g_dropout(g: Gen, shape):
    attrs: dict = {}
    _maybe(g, attrs, "p", g.pick((0.0, 0.1, 0.5)))
    return attrs, shape


def g_flatten(g: Gen, shape):
    r = len(shape)
    if r < 2:
        return None
    start = g.num(0, r - 1)
    end = g.num(start, r - 1)
    attrs: dict = {}
    if start != 1 or g.flag(0.3):
        attrs["start"] = start if g.flag() else start - r
    if end != r - 1 or g.flag(0.3):
        attrs["end"] = end if g.flag() else end - r
    merged = shape[start:end + 1]
    if len(merged) == 1:
        new = merged[0]
    else:
        new = Size("*".join(s.paren() for s in merged), math.prod(s.value for s in merged),
                   all(s.exact for s in merged))
    return attrs, shape[:start] + [new] + shape[end + 1:]


def g_reshape(g: Gen, shape):
    if not all(s.exact for s in shape):  # re-anchor: literal sizes are what costspec will hold
        shape = [Size(s.value, s.value) for s in shape]
    r = len(shape)
    if r >= 2 and (r >= MAX_RANK or g.flag()):  # merge two neighbours (always at the rank limit), keeping the others
        i = g.num(0, r - 2)
        merged = Size(f"{shape[i].paren()}*{shape[i + 1].paren()}", shape[i].value * shape[i + 1].value)
        new = shape[:i] + [merged] + shape[i + 2:]
        written = [s.expr for s in new]
        if g.flag(0.4):  # costspec infers a -1 as elements / known sizes: its expression is its own
            i = g.num(0, len(written) - 1)
            written[i] = -1
            new[i] = Size(new[i].value, new[i].value, False)
        return {"shape": written}, new
    # split the last dim by one of its divisors
    last = shape[-1]
    d = g.pick(divisors(last.value))
    a, b = Size(d, d), Size(f"{last.paren()}//{d}" if d > 1 else last.expr, last.value // d)
    if g.flag(0.3):  # costspec infers a -1 as elements / known sizes: its expression is its own
        written = [s.expr for s in shape[:-1]] + [a.expr, -1]
        b = Size(last.value // d, last.value // d, False)
    else:
        written = [s.expr for s in shape[:-1]] + [a.expr, b.expr]
    return {"shape": written}, shape[:-1] + [a, b]


def g_transpose(g: Gen, shape):
    r = len(shape)
    if r < 2:
        return None
    i, j = g.num(0, r - 1), g.num(0, r - 1)
    new = list(shape)
    new[i], new[j] = new[j], new[i]
    return {"axis0": i if g.flag() else i - r, "axis1": j if g.flag() else j - r}, new


GENERATORS: dict[str, Callable] = {
    "linear": g_linear, "mlp": g_mlp, "attention": g_attention, "conv2d": g_conv2d,
    "patch_embed": g_patch_embed, "layernorm": g_layernorm, "layernorm2d": _norm(lambda r: r == 4),
    "rmsnorm": _norm(lambda r: r >= 1), "activation": g_activation, "softmax": g_softmax,
    "dropout": g_dropout, "flatten": g_flatten, "reshape": g_reshape, "transpose": g_transpose,
}
# Ops that keep the input shape whatever their attributes: usable anywhere in a shape-keeping body.
KEEPING = ("layernorm", "rmsnorm", "layernorm2d", "activation", "softmax", "dropout", "attention")


# ----------------------------------------------------------------------------------------------
# Generic generator for ops this file does not know yet
# ----------------------------------------------------------------------------------------------
def _generic_attrs(g: Gen, op) -> dict:
    attrs = {}
    for a in op.attrs:
        if a.default is not REQUIRED and not g.flag(0.2):
            continue
        if a.kind == "choice":
            attrs[a.name] = g.pick(a.choices)
        elif a.kind == "bool":
            attrs[a.name] = g.flag()
        elif a.kind == "number":
            attrs[a.name] = g.pick((0.0, 0.5, 1.0))
        elif a.kind == "axis":
            attrs[a.name] = g.pick((-1, 0, 1))
        elif a.kind == "count":
            attrs[a.name] = g.num(0, 3)
        elif a.kind == "pair":
            attrs[a.name] = g.num(1, 3)
        elif a.kind == "shape":
            attrs[a.name] = [-1]
        else:
            attrs[a.name] = g.size().expr
    return attrs


@lru_cache(maxsize=4096)
def _probe(op: str, attrs_yaml: str, shape_yaml: str, dims_yaml: str) -> tuple | None:
    """One op on the spec's own dims and input expressions: ((value, same expression as the input's dim
    at that index) per output dim), or None when costspec refuses it."""
    spec = {"costspec": 1, "name": "probe", "dims": yaml.safe_load(dims_yaml), "input": yaml.safe_load(shape_yaml),
            "layers": [{op: yaml.safe_load(attrs_yaml)}]}
    text = yaml.safe_dump(spec, sort_keys=False)
    try:
        model = costspec.loads(text)
        values = model.bind()
        same = [i < len(model.in_shape) and sympy.simplify(sympy.sympify(d) - model.in_shape[i]) == 0
                for i, d in enumerate(model.out_shape)]
        return tuple((int(sympy.sympify(d).xreplace(values)), s) for d, s in zip(model.out_shape, same))
    except CostspecError:
        return None
    except Exception as exc:  # noqa: BLE001 - the loader must only raise CostspecError
        if known_loader_crash(exc):
            return None
        raise AssertionError(f"the loader crashed with {type(exc).__name__}: {exc}\n--- spec ---\n{text}") from exc


# Known loader crashes (an exception other than CostspecError): id -> (test(exc), its strict-xfail test).
# Empty: every crash the fuzzer found is fixed.
KNOWN_LOADER_CRASHES: dict[str, tuple[Callable, str]] = {}


def known_loader_crash(exc: BaseException) -> str | None:
    """The id of the known bug a loader crash matches."""
    for bug, (test, _) in KNOWN_LOADER_CRASHES.items():
        if test(exc):
            return bug
    return None


def g_generic(name: str):
    def gen(g: Gen, shape):
        if not all(s.exact for s in shape):  # probe on literal sizes: what costspec holds is not known here
            shape = [Size(s.value, s.value, False) for s in shape]
        attrs = _generic_attrs(g, spec_ops()[name])
        written = [s.expr if s.exact else s.value for s in shape]
        out = _probe(name, yaml.safe_dump(attrs), yaml.safe_dump(written), yaml.safe_dump(g.raw_dims))
        if out is None or any(not 1 <= v <= 4096 for v, _ in out):
            return None
        # a dim the op passes through keeps its expression; the others are known by value only (inexact:
        # never used where an expression must match costspec's symbolically)
        return attrs, [shape[i] if same and shape[i].exact else Size(v, v, False) for i, (v, same) in enumerate(out)]

    return gen


def leading(name: str) -> bool:
    """Ops whose input is the model input itself (they define `example_input`, e.g. token ids)."""
    from costspec.ops.opdef import OpDef

    op = spec_ops().get(name)
    return op is not None and getattr(type(op), "example_input", None) is not getattr(OpDef, "example_input", None)


def generators(generic: bool = True) -> dict[str, Callable]:
    """op name -> generator, for every op a spec may name (registered now)."""
    out = {}
    for name in sorted(spec_ops()):
        if name in GENERATORS:
            out[name] = GENERATORS[name]
        elif generic:
            out[name] = g_generic(name)
    return out


def unknown_ops() -> list[str]:
    """Registered spec ops without a dedicated generator here (drawn through the generic one)."""
    return sorted(set(spec_ops()) - set(GENERATORS))


# ----------------------------------------------------------------------------------------------
# Layers and compositions
# ----------------------------------------------------------------------------------------------
def _decorate(g: Gen, layer: dict, named: bool = True) -> dict:
    if named and g.flag(0.25):
        layer["name"] = g.name()
    if g.flag(0.1):
        layer["precision"] = g.pick(DTYPES)
    return layer


def op_layer(g: Gen, shape, names=None):
    """One op layer that fits `shape`, or None."""
    gens = generators(g.generic_ops)
    first = g.ops == 0 and g.depth == 0 and g.params is None
    names = [n for n in (names or gens) if first or not leading(n)]
    for _ in range(6):
        op = g.pick(names)
        if op not in gens:
            continue
        out = gens[op](g, shape)
        if out is not None:
            g.ops += 1
            attrs, new = out
            return _decorate(g, {op: attrs if attrs or g.flag() else None}), new
    return None


def keeping_body(g: Gen, shape, min_len: int = 1) -> list:
    """Layers whose output shape is (symbolically) their input shape."""
    layers = []
    n = g.num(min_len, 3)
    for _ in range(n):
        if g.ops >= MAX_OPS:
            break
        choice = g.num(0, 11)
        if choice >= 10:  # dataflow: a saved value read again, branches, a shortcut, cross-attention
            out = flow_layers(g, shape, keeping=True)
            if out:
                layers.extend(out[0])
            continue
        if choice <= 4:
            names = [k for k in KEEPING if k in spec_ops()]
            out = op_layer(g, shape, names)
            if out:
                layers.append(out[0])
        elif choice == 5 and len(shape) in (2, 3, 4):  # mlp with its default out
            attrs = {"hidden": g.size().expr}
            _maybe(g, attrs, "fn", g.param_choice("choice", ACTS, g.pick(ACTS)))
            _maybe(g, attrs, "bias", g.param_choice("bool", (True, False), g.flag()), 0.3)
            g.ops += 1
            layers.append(_decorate(g, {"mlp": attrs}))
        elif choice == 6 and shape[-1].exact:  # linear out, (activation), linear back
            hidden = g.size()
            pair = [{"linear": {"out": hidden.expr}}]
            if g.flag():
                pair.append({"activation": {"fn": g.param_choice("choice", ACTS, g.pick(ACTS))}})
            pair.append({"linear": {"out": shape[-1].expr, "bias": g.param_choice("bool", (True, False), g.flag())}})
            g.ops += len(pair)
            layers.extend(_decorate(g, layer) for layer in pair)
        elif choice == 7 and len(shape) == 4 and shape[1].exact:
            g.ops += 1
            layers.append(_decorate(g, {"conv2d": g_conv_same(g, shape)[0]}))
        elif choice == 8 and g.depth < 3:
            layers.append(composition(g, shape, keeping=True)[0])
        elif choice == 9 and len(shape) >= 2:  # transpose there and back
            i, j = g.num(0, len(shape) - 1), g.num(0, len(shape) - 1)
            g.ops += 2
            layers += [{"transpose": {"axis0": i, "axis1": j}}, {"transpose": {"axis0": j, "axis1": i}}]
    if not layers:
        layers.append({"activation": {"fn": "relu"}} if g.params is None or g.flag() else {"layernorm": {}})
        g.ops += 1
    return layers


def _new_block(g: Gen, shape) -> tuple[str, list]:
    """Define a block with parameters for `shape`; return its name and its params table."""
    name = f"blk{len(g.blocks)}"
    g.blocks[name] = []  # reserve the name: blocks drawn inside this one get others
    saved_params, saved_depth = g.params, g.depth
    g.params, g.depth = [], g.depth + 1
    body = keeping_body(g, shape)
    params = g.params
    g.params, g.depth = saved_params, saved_depth
    if params or g.flag():
        g.blocks[name] = {"params": {p: default for p, _, _, default in params}, "layers": body}
        if g.flag(0.3):
            g.blocks[name]["doc"] = "a drawn block"
    else:
        g.blocks[name] = body
    return name, params


def _args(g: Gen, params: list) -> dict:
    """Arguments for a block: a random subset of its parameters, each drawn from its domain."""
    out = {}
    for pname, kind, domain, _ in params:
        if g.flag(0.5):
            value = g.pick(domain)
            out[pname] = g.term_for(value).expr if kind == "size" and g.params is None else value
    return out


def composition(g: Gen, shape, keeping: bool) -> tuple[dict, list]:
    """A residual, a named sequence, a repeat or a block use (keeping the shape if asked)."""
    g.depth += 1
    visible = list(g.values)  # values saved inside are not read after it (a repeat's are its own)
    try:
        kind = g.pick(("residual", "sequence", "repeat", "block"))
        if kind == "residual":
            return {"residual": keeping_body(g, shape)}, shape
        if kind == "sequence":
            layers, new = (keeping_body(g, shape), shape) if keeping else free_body(g, shape)
            layer = {"sequence": layers}
            if g.flag(0.7):
                layer["name"] = g.name()
            return _decorate(g, layer, named=False), new
        if kind == "block":
            name, params = _new_block(g, shape)
            layer = {"block": name}
            args = _args(g, params)
            if args:
                layer["args"] = args
            return _decorate(g, layer), shape
        return repeat_layer(g, shape), shape
    finally:
        g.depth -= 1
        g.values = visible


def repeat_layer(g: Gen, shape, count: Size | None = None, variants: bool = True) -> dict:
    count = count or g.term_for(g.num(1, 4))  # never a block parameter: the variants' indices need its value
    layer: dict = {"repeat": count.expr}
    if g.flag(0.6):
        layer["name"] = g.name()
    if g.flag(0.1):
        layer["precision"] = g.pick(DTYPES)
    if g.flag(0.5):
        name, params = _new_block(g, shape)
        layer["body"] = name
        args = _args(g, params)
        if args:
            layer["args"] = args
    else:
        params = None
        layer["body"] = keeping_body(g, shape)
    if variants and g.flag(0.4):
        free = list(range(count.value))
        at = []
        for _ in range(g.num(1, 2)):
            if not free:
                break
            idx = sorted(g.draw(st.sets(st.sampled_from(free), min_size=1, max_size=len(free))))
            free = [i for i in free if i not in idx]
            variant: dict = {"indices": idx}
            if g.flag(0.5):
                variant["name"] = g.name()
            if params:
                args = _args(g, params)
                if args:
                    variant["args"] = args
            at.append(variant)
        layer["at"] = at
    return layer


# ----------------------------------------------------------------------------------------------
# Dataflow: named values, branches and joins, shortcuts, further inputs, cross-attention.
# Every value drawn is read: `input:` only right after a `save:` whose value a later layer reads.
# ----------------------------------------------------------------------------------------------
def _same(a: list, b: list) -> bool:
    """Shapes written alike (so costspec holds the same expressions)."""
    return len(a) == len(b) and all(x.exact and y.exact and str(x.expr) == str(y.expr) for x, y in zip(a, b))


def _top_level(shape: list) -> bool:
    """A shape whose expressions mean the same at the top of the spec (no block parameter in them)."""
    import re

    return all(s.exact and not re.search(r"\bp\d+\b", str(s.expr)) for s in shape)


def _value_name(g: Gen, prefix: str = "v") -> str:
    g.nvalues += 1
    return f"{prefix}{g.nvalues}"


def _keeping_op(g: Gen, shape) -> dict:
    out = op_layer(g, shape, [k for k in KEEPING if k in spec_ops()])
    if out:
        return out[0]
    g.ops += 1
    return {"activation": {"fn": g.pick(ACTS)}}


def _saved(g: Gen, layer: dict, shape) -> str:
    name = _value_name(g)
    layer["save"] = name
    g.values.append((name, list(shape)))
    return name


def _concat_size(sizes: list[Size]) -> Size:
    exact = all(s.exact for s in sizes)
    return Size(" + ".join(s.paren() for s in sizes) if exact else sum(s.value for s in sizes),
                sum(s.value for s in sizes), exact)


def _join_layer(g: Gen, shape, others: list[str], concat: bool) -> tuple[dict, list]:
    """add / mul (broadcasting values already checked to agree) or concat on an axis whose other dims agree."""
    join = "concat" if concat else g.pick(("add", "mul"))
    attrs: dict = {"with": others[0] if len(others) == 1 and g.flag() else list(others)}
    new = list(shape)
    if concat:
        axis = g.num(0, len(shape) - 1)
        attrs["axis"] = axis if g.flag() else axis - len(shape)
        new[axis] = _concat_size([shape[axis]] * (len(others) + 1))
    g.ops += 1
    return _decorate(g, {join: attrs}), new


def flow_skip(g: Gen, shape, keeping: bool):
    """A value saved, shape-keeping layers, then the running value joined with it (a U-Net skip)."""
    first = _keeping_op(g, shape)
    name = _saved(g, first, shape)
    middle = keeping_body(g, shape, 0) if g.flag(0.7) else []
    join, new = _join_layer(g, shape, [name] * g.pick((1, 1, 1, 2)), concat=not keeping and g.flag(0.4))
    return [first, *middle, join], new


def flow_gate(g: Gen, shape, keeping: bool):
    """Squeeze-excitation by names: a saved value, a gate (keepdim mean) saved, the first value read again
    by `input:`, then multiplied (or added) with the broadcast gate."""
    if len(shape) < 2:
        return None
    first = _keeping_op(g, shape)
    a = _saved(g, first, shape)
    axes = sorted(g.draw(st.sets(st.integers(1, len(shape) - 1), min_size=1, max_size=len(shape) - 1)))
    gate_shape = [Size(1, 1) if i in axes else s for i, s in enumerate(shape)]
    gate = [{"mean": {"axes": axes if g.flag() else [i - len(shape) for i in axes], "keepdim": True}}]
    if g.flag():
        gate.append({"activation": {"fn": g.pick(ACTS)}})
    gname = _saved(g, gate[-1], gate_shape)
    again = _keeping_op(g, shape)
    again["input"] = a
    g.ops += len(gate)
    join, _ = _join_layer(g, shape, [gname], concat=False)
    return [first, *gate, again, join], shape


def flow_read(g: Gen, shape, keeping: bool):
    """A join with a value saved earlier (possibly outside this repeat / branch) of the same shape."""
    names = [n for n, s in g.values if _same(s, shape)]
    if not names:
        return None
    return [_join_layer(g, shape, [g.pick(names)], concat=False)[0]], shape


def flow_extra_input(g: Gen, shape, keeping: bool):
    """A further model input (`inputs:`) shaped like the running value: the running value saved, the
    input read by `input:`, then joined with the saved value."""
    if g.params is not None or not _top_level(shape):
        return None
    x = _value_name(g, "x")
    g.inputs[x] = list(shape)
    first = _keeping_op(g, shape)
    a = _saved(g, first, shape)
    g.values.append((x, list(shape)))
    reader = _keeping_op(g, shape)
    reader["input"] = x
    join, new = _join_layer(g, shape, [a], concat=not keeping and g.flag(0.3))
    return [first, reader, join], new


def flow_cross(g: Gen, shape, keeping: bool):
    """Cross-attention: keys and values from a saved value or a further model input [B, T, Ckv]."""
    if len(shape) != 3 or not shape[0].exact:
        return None
    layers = []
    names = [n for n, s in g.values if len(s) == 3 and s[0].exact and str(s[0].expr) == str(shape[0].expr)]
    if not names or g.flag(0.3):
        if g.params is None and _top_level(shape[:1]) and g.flag():
            name = _value_name(g, "mem")
            g.inputs[name] = [shape[0], g.size(1, 9), g.size(1, 12)]
            g.values.append((name, g.inputs[name]))
        else:  # the running value itself, saved and read as keys and values too
            first = _keeping_op(g, shape)
            name = _saved(g, first, shape)
            layers.append(first)
    else:
        name = g.pick(names)
    c = shape[2].value
    heads = g.pick(divisors(c))
    attrs: dict = {"heads": g.term_for(heads).expr, "kv": name}
    for key in ("qkv_bias", "proj_bias", "fused_qkv"):
        _maybe(g, attrs, key, g.flag(), 0.3)
    _maybe(g, attrs, "backend", g.pick(("flash", "math")), 0.4)
    if heads > 1 and g.flag(0.25):
        attrs["kv_heads"] = g.pick([d for d in divisors(heads) if d < heads])
    g.ops += 1
    layers.append(_decorate(g, {"attention": attrs}))
    return layers, shape


def _mean_branch(g: Gen, shape) -> tuple[list, list]:
    axes = sorted(g.draw(st.sets(st.integers(1, len(shape) - 1), min_size=1, max_size=len(shape) - 1)))
    g.ops += 1
    return [{"mean": {"axes": axes, "keepdim": True}}], [Size(1, 1) if i in axes else s for i, s in enumerate(shape)]


def flow_parallel(g: Gen, shape, keeping: bool):
    """`parallel:` with 2-3 branches and a join whose branch shapes agree."""
    n = g.num(2, 3)
    join = "add" if keeping and g.flag() else g.pick(("add", "mul") if keeping else ("add", "mul", "concat"))
    widen = not keeping and len(shape) <= 6 and g.flag(0.3)  # every branch ends in a linear to a width of its own (concat) or one width
    width = g.size()
    branches, outs = [], []
    axis = g.num(0, len(shape) - 1) if join == "concat" else len(shape) - 1
    if widen:
        axis = len(shape) - 1
    g.depth += 1
    visible = list(g.values)
    try:
        for i in range(n):
            if widen:
                w = g.size() if join == "concat" else width
                body = keeping_body(g, shape, 0) if g.flag(0.4) else []
                body.append(_decorate(g, {"linear": {"out": w.expr}}))
                g.ops += 1
                branches.append(body)
                outs.append(shape[:-1] + [w])
            elif join != "concat" and len(shape) >= 2 and i > 0 and g.flag(0.3):
                pre = keeping_body(g, shape, 0) if g.flag() else []
                mean, out = _mean_branch(g, shape)
                branches.append(pre + mean)
                outs.append(out)
            else:
                branches.append([] if g.flag(0.3) else keeping_body(g, shape))
                outs.append(list(shape))
            g.values = list(visible)
    finally:
        g.depth -= 1
    if all(any(s.value == 1 and o.value != 1 for s, o in zip(out, shape)) for out in outs):
        return None  # every branch broadcast: not this generator's shape
    spec: dict = {"branches": branches}
    if join != "add" or g.flag(0.3):
        spec["join"] = join
    if join == "concat":
        spec["axis"] = axis if g.flag() else axis - len(shape)
        new = list(outs[0])
        new[axis] = _concat_size([o[axis] for o in outs])
    else:
        new = next(o for o in outs if not any(s.value == 1 and x.value != 1 for s, x in zip(o, shape)))
    return [{"parallel": spec}], new


def flow_shortcut(g: Gen, shape, keeping: bool):
    """`residual: {body, shortcut}`: both change the shape the same way (a linear to one width, or a
    strided conv to one channel count)."""
    g.depth += 1
    visible = list(g.values)
    try:
        if len(shape) == 4 and g.flag(0.5):
            stride = 1 if keeping else g.pick((1, 2))
            out = shape[1] if keeping and shape[1].exact else g.size()
            if keeping and not shape[1].exact:
                return None
            body = [{"conv2d": {"out": out.expr, "kernel": 3, "padding": 1, "stride": stride}}]
            if g.flag():
                body.append({"activation": {"fn": g.pick(ACTS)}})
            if "batchnorm" in spec_ops() and g.flag():
                body.append({"batchnorm": {}})
            short = [{"conv2d": {"out": out.expr, "kernel": 1, "stride": stride, "bias": g.flag()}}]
            g.ops += len(body) + 1
            new = shape if keeping else [shape[0], out, _conv_out_expr(shape[2], 3, stride, 1, 1),
                                         _conv_out_expr(shape[3], 3, stride, 1, 1)]
        else:
            if (keeping and not shape[-1].exact) or len(shape) > 6:  # linear takes ranks 1-6
                return None
            w = shape[-1] if keeping else g.size()
            body = (keeping_body(g, shape, 0) if g.flag() else []) + [{"linear": {"out": w.expr}}]
            if g.flag():
                body += keeping_body(g, shape[:-1] + [w])
            short = [{"linear": {"out": w.expr, "bias": g.flag()}}]
            if g.flag(0.3):
                short.append({"layernorm": {}})
                g.ops += 1
            g.ops += 2
            new = shape[:-1] + [w]
    finally:
        g.depth -= 1
        g.values = visible
    return [{"residual": {"body": body, "shortcut": short}}], new


FLOWS = {"skip": flow_skip, "gate": flow_gate, "read": flow_read, "extra_input": flow_extra_input,
         "cross": flow_cross, "parallel": flow_parallel, "shortcut": flow_shortcut}


def flow_layers(g: Gen, shape, keeping: bool):
    """Layers drawn by one dataflow generator, and the shape they give (keeping it if asked), or None."""
    if g.ops >= MAX_OPS or g.depth >= 3:
        return None
    return FLOWS[g.pick(sorted(FLOWS))](g, shape, keeping)


def free_body(g: Gen, shape, n: int | None = None) -> tuple[list, list]:
    """Layers in sequence, each fitting the shape the previous one gives."""
    layers = []
    n = n if n is not None else g.num(1, 4)
    for _ in range(n):
        if g.ops >= MAX_OPS:
            break
        if g.depth < 3 and g.flag(0.3):
            layer, shape = composition(g, shape, keeping=False)
            layers.append(layer)
            continue
        if g.depth < 3 and g.flag(0.25):
            flow = flow_layers(g, shape, keeping=False)
            if flow:
                layers.extend(flow[0])
                shape = flow[1]
                continue
        out = op_layer(g, shape)
        if out is None:
            continue
        layers.append(out[0])
        shape = out[1]
    if not layers:
        layers.append({"activation": {"fn": "relu"}})
        g.ops += 1
    return layers, shape


# ----------------------------------------------------------------------------------------------
# Whole specs
# ----------------------------------------------------------------------------------------------
def draw_dims(g: Gen) -> dict:
    """Free dims (B and a few others) and derived dims; fills g.dims with their values."""
    dims: dict[str, Any] = g.raw_dims
    b = g.num(1, 4)
    g.dims["B"] = b
    dims["B"] = b if g.flag() else {"value": b, "doc": "batch size", **({"keep": True} if g.flag(0.3) else {})}
    for name in g.draw(st.lists(st.sampled_from(FREE_POOL), unique=True, max_size=4)):
        value = g.pick((1, 2, 3, 4, 5, 6, 8, 12, 16))
        g.dims[name] = value
        dims[name] = value if g.flag(0.8) else {"value": value, "doc": f"dim {name}"}
    free = [n for n in g.dims]
    for name in g.draw(st.lists(st.sampled_from(DERIVED_POOL), unique=True, max_size=2)):
        a, b2 = g.pick(free), g.pick(free)
        va, vb = g.dims[a], g.dims[b2]
        options = [(f"2*{a}", 2 * va), (f"{a} + 1", va + 1), (f"{a}*{b2}", va * vb), (f"({a} // 2)*2 + 1", (va // 2) * 2 + 1),
                   (f"max({a}, {b2})", max(va, vb)), (f"{a} if {a} > 2 else {b2}", va if va > 2 else vb),
                   (f"({a} + {b2})**2", (va + vb) ** 2)]
        expr, value = g.pick([o for o in options if 1 <= o[1] <= MAX_VALUE] or options[:1])
        g.dims[name] = value
        dims[name] = expr if g.flag(0.8) else {"value": expr, "doc": f"derived {name}"}
        free.append(name)
    return dims


def draw_input(g: Gen) -> list[Size]:
    family = g.pick(("tokens", "tokens", "image", "matrix", "any"))
    b = Size("B", g.dims["B"])
    if family == "tokens":
        return [b, g.size(1, 9), g.term_for(g.pick((2, 4, 6, 8, 12, 16)))]
    if family == "image":
        return [b, g.size(1, 4), g.term_for(g.pick((4, 6, 8, 12))), g.term_for(g.pick((4, 6, 8, 12)))]
    if family == "matrix":
        return [b, g.size(1, 16)]
    return [b] + [g.size(1, 5) for _ in range(g.num(0, 3))]


def _spec(g: Gen, dims, shape, layers) -> dict:
    spec: dict[str, Any] = {"costspec": 1, "name": "fuzz"}
    if g.flag(0.3):
        spec["doc"] = "a spec drawn by fuzz/specgen.py"
    if g.flag(0.2):
        spec["source"] = ["hypothesis"] if g.flag() else "hypothesis"
    spec["dims"] = dims
    if g.flag(0.6):
        spec["precision"] = {"dtype": g.pick(DTYPES)}
    if g.flag(0.2):
        spec["costs"] = {k: g.num(0, 9) for k in g.draw(st.lists(st.sampled_from(sorted(default_table())),
                                                                  unique=True, min_size=1, max_size=3))}
    spec["input"] = [s.expr for s in shape]
    if g.inputs:
        spec["inputs"] = {name: [s.expr for s in dims] for name, dims in g.inputs.items()}
    if g.blocks:
        spec["blocks"] = g.blocks
    spec["layers"] = layers
    return spec


@st.composite
def valid_specs(draw, generic_ops: bool = True) -> dict:
    """A valid spec as a dict (dump it with `dump()`)."""
    g = Gen(draw, generic_ops=generic_ops)
    dims = draw_dims(g)
    shape = draw_input(g)
    layers, _ = free_body(g, shape, g.num(1, 5))
    return _spec(g, dims, shape, layers)


@st.composite
def flow_specs(draw, kind: str) -> dict:
    """A valid spec whose layers include the dataflow generator `kind` (FLOWS) at least once."""
    g = Gen(draw, generic_ops=False)
    dims = draw_dims(g)
    shape = shape0 = draw_input(g)
    layers: list = []
    if g.flag():
        layers, shape = free_body(g, shape, g.num(1, 2))
    for _ in range(4):
        out = FLOWS[kind](g, shape, g.flag(0.3))
        if out:
            layers += out[0]
            shape = out[1]
            break
        layers.append({"layernorm": {}})  # a rank this generator may not take: change nothing and retry
        split = shape[-1].value % 2 == 0 and len(shape) < MAX_RANK  # a split keeps the rank within the limit
        layers.append({"reshape": {"shape": [s.value for s in shape[:-1]] + [2, -1]}} if split
                      else {"linear": {"out": 6}})
        shape = [Size(s.value, s.value) for s in shape[:-1]] + (
            [Size(2, 2), Size(shape[-1].value // 2, shape[-1].value // 2, False)] if split else [Size(6, 6)])
    if g.flag(0.3):
        layers += free_body(g, shape, 1)[0]
    return _spec(g, dims, shape0, layers)


@dataclass
class RepeatCase:
    """One body, repeated 1 and k times after the same prefix (and the prefix alone)."""

    prefix_only: dict | None  # None when the prefix is empty (cost 0)
    once: dict
    k_times: dict
    k: int
    variants: list  # [(count, spec with the repeat once, using the variant's args)]


@st.composite
def repeat_cases(draw) -> RepeatCase:
    """Specs for "repeat-k = k x the body": same dims, prefix and body; repeat count 1 and k."""
    g = Gen(draw, generic_ops=False)
    dims = draw_dims(g)
    shape = shape0 = draw_input(g)
    prefix: list = []
    if g.flag(0.7):
        prefix, shape = free_body(g, shape, g.num(1, 2))
    if g.flag(0.5):
        prefix.append({"layernorm": {}})  # the repeat's input then needs a gradient: dX everywhere
    k = g.num(2, 5)
    layer = repeat_layer(g, shape, Size(k, k), variants=True)
    base = _spec(g, dims, shape0, [])

    def with_layers(layers):
        spec = copy.deepcopy(base)
        spec["layers"] = layers
        return spec

    once = copy.deepcopy(layer)
    once["repeat"] = 1
    at = once.pop("at", [])
    k_times = copy.deepcopy(layer)
    variants = []
    for v in at:
        single = copy.deepcopy(once)
        single["args"] = {**once.get("args", {}), **v.get("args", {})}
        if not single["args"]:
            del single["args"]
        variants.append((len(v["indices"]), with_layers(prefix + [single])))
    return RepeatCase(with_layers(prefix) if prefix else None, with_layers(prefix + [once]),
                      with_layers(prefix + [k_times]), k, variants)


def dump(spec: dict) -> str:
    return yaml.safe_dump(spec, sort_keys=False, allow_unicode=True)


# ----------------------------------------------------------------------------------------------
# Mutations
# ----------------------------------------------------------------------------------------------
HOSTILE = (
    "__import__('os').system('true')", "().__class__", "open('/etc/passwd')", "lambda: 1", "B.__class__",
    "2**10**10", "10**1000", "B**B**B", "1/0", "B // 0", "B % 0", "-B", "0", "-1", "B - B", "nan", "inf",
    "1e309", "0.5", "B/3", "x if", "B if B > 1", "[1, 2]", "{}", "", " ", "B +", "min()", "max(B)", "ceil(B, B)",
    "floor(B/2)", "B in [1, 2]", "not B", "B and C", "B < C", "(B", "B)", "f'{B}'", "B @ B", "B << 2", "~B",
    "B is B", "'B'", "b'B'", "1j", "B[0]", "B.real", "print(B)", "__builtins__", "exec", "eval('1')",
    "B" * 300, "(" * 100 + "B" + ")" * 100, "+".join(["B"] * 500), "é", "\u202e", "B\x00", "B\nC", "9" * 500,
    "ceil(B / 2) if B > 2 else floor(B / 3)", "max(B, C, D, E)", "B**1024", "B**8", "B**9", "2**4096",
    "blk0", "gelu", "true", "null", "~", "&a", "*a", "!!python/object:os.system", "<<: *a",
)
JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 70), st.integers(-(10**40), 10**40),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(HOSTILE),
    st.text(max_size=12), st.lists(st.integers(-2, 9), max_size=3), st.just({}), st.just([]),
    st.dictionaries(st.sampled_from(("value", "doc", "keep", "x", "layers", "params")), st.integers(0, 5),
                    max_size=2),
)
KEYS = ("name", "body", "at", "args", "precision", "repeat", "residual", "sequence", "block", "layers", "params",
        "indices", "value", "doc", "keep", "dims", "blocks", "costs", "input", "foo", "dtype", "heads", "out", "in",
        "hidden", "fn", "kernel", "groups", "axis", "shape", "steps", "forward", "training", "others",
        "save", "with", "kv", "inputs", "parallel", "branches", "join", "shortcut")


def _paths(node, prefix=()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, prefix + (i,))
    return out


def _get(node, path):
    for step in path:
        node = node[step]
    return node


def _strings(node) -> list[str]:
    out = []
    for path in _paths(node):
        value = _get(node, path)
        if isinstance(value, str):
            out.append(value)
        if path and isinstance(path[-1], str):
            out.append(path[-1])
    return out


def _expr_soup(draw, words: list[str]) -> str:
    tokens = st.one_of(st.sampled_from(words or ["B"]), st.sampled_from(("+", "-", "*", "/", "//", "%", "**", "(", ")",
                                                                         " if ", " else ", ">", "min(", "max(", ",",
                                                                         "ceil(", "floor(", " in [", "]")),
                       st.integers(-3, 100).map(str))
    return "".join(draw(st.lists(tokens, min_size=1, max_size=8)))


def _divisor_expr(draw, dims: list[str]) -> str:
    """A size whose divisor can be 0, zoo or nan at some dims: a difference of dims under /, //, %,
    ceil, floor, or a look-alike / escape-laden name."""
    a = draw(st.sampled_from(dims or ["B"]))
    b = draw(st.sampled_from(dims or ["B"]))
    k = draw(st.integers(1, 4))
    return draw(st.sampled_from((
        f"{a}*2/({b} - {a})", f"{a} + {a} % ({b} - {a})", f"{a} % ({b} - {a}) + 1", f"{a} // ({b} - {k})",
        f"ceil({a} / ({b} - {k}))", f"floor({a} * {k} / ({a} - {b} + {k}))", f"({a} - {b}) / ({a} - {b})",
        f"1 / ({a} - {a})", f"{a} * ({b} - {a}) / ({b} - {a})", f"max({a}, {b} % ({a} - {k}))",
        f"{a} if {b} % ({a} - {b}) == 0 else {k}", f"ceil(8*{a}/3)", f"{a} + 0.0", f"{a} * {k}.0",
        "ℂ", "Ｃ", "𝐂", f"{a}\u0336", "12345678901234567.0", "1e16 + 1", f"{a}\u200b",
    )))


ESCAPES = ("\x1b[2J", "\r", "\x07", "\u202e", "\n\\input{x}", "^^M", "|", "`", "<b>", "\x1b]0;t\x07")

SOFT = ("retarget", "toggle", "number", "duplicate", "divisor", "flow")  # mutations that often leave a spec loadable
HARD = ("delete", "junk", "junk", "add_key", "duplicate", "rename", "swap_op", "number", "expr", "expr", "share",
        "retarget", "retarget", "retarget", "toggle", "divisor", "divisor", "escape", "flow", "flow", "flow")


def mutate(draw, spec: dict, kinds: tuple = HARD) -> dict:
    """One random structural mutation of `spec` (a deep copy is changed and returned)."""
    spec = copy.deepcopy(spec)
    paths = [p for p in _paths(spec) if p]
    path = draw(st.sampled_from(paths))
    parent = _get(spec, path[:-1])
    key = path[-1]
    words = sorted({w for w in _strings(spec) if isinstance(w, str) and w.isidentifier()} | set(spec_ops()))
    kind = draw(st.sampled_from(kinds))
    if kind == "flow":
        flow_mutate(draw, spec)
    elif kind == "delete":
        del parent[key]
    elif kind == "junk":
        parent[key] = draw(JUNK)
    elif kind == "add_key":
        target = _get(spec, draw(st.sampled_from([p for p in _paths(spec) if isinstance(_get(spec, p), dict)])))
        target[draw(st.sampled_from(KEYS + tuple(words)))] = draw(st.one_of(JUNK, st.sampled_from(
            [copy.deepcopy(_get(spec, p)) for p in paths[:40]])))
    elif kind == "duplicate":
        lists = [p for p in _paths(spec) if isinstance(_get(spec, p), list) and _get(spec, p)]
        if lists:
            target = _get(spec, draw(st.sampled_from(lists)))
            i = draw(st.integers(0, len(target) - 1))
            target.insert(i, copy.deepcopy(target[i]))
    elif kind == "rename":
        strings = [p for p in paths if isinstance(_get(spec, p), str)]
        if strings:
            p = draw(st.sampled_from(strings))
            _get(spec, p[:-1])[p[-1]] = draw(st.sampled_from(words + ["nope", "steps", "forward", "blk0", "B"]))
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(words))] = parent.pop(key)
    elif kind == "swap_op":
        layers = [p for p in paths if isinstance(_get(spec, p), dict) and set(_get(spec, p)) & set(spec_ops())]
        if layers:
            layer = _get(spec, draw(st.sampled_from(layers)))
            old = next(k for k in layer if k in spec_ops())
            layer[draw(st.sampled_from(sorted(spec_ops())))] = layer.pop(old)
    elif kind == "number":
        numbers = [p for p in paths if isinstance(_get(spec, p), int) and not isinstance(_get(spec, p), bool)]
        if numbers:
            p = draw(st.sampled_from(numbers))
            value = _get(spec, p)
            _get(spec, p[:-1])[p[-1]] = draw(st.sampled_from((0, -1, 1, value + 1, value - 1, 2 * value, 10**30,
                                                               value * 1000, 7, 3)))
    elif kind == "expr":
        strings = [p for p in paths if isinstance(_get(spec, p), (str, int)) and not isinstance(_get(spec, p), bool)]
        if strings:
            p = draw(st.sampled_from(strings))
            _get(spec, p[:-1])[p[-1]] = draw(st.one_of(st.sampled_from(HOSTILE), st.builds(lambda: None).map(
                lambda _: _expr_soup(draw, words))))
    elif kind == "retarget":  # a size replaced by another plausible size: a dim, a multiple, a literal
        sizes = [p for p in paths if isinstance(_get(spec, p), (str, int)) and not isinstance(_get(spec, p), bool)
                 and p[0] in ("input", "layers", "blocks", "dims")]
        dims = [d for d in spec.get("dims", {}) if isinstance(d, str)] if isinstance(spec.get("dims"), dict) else []
        if sizes:
            p = draw(st.sampled_from(sizes))
            options = [str(draw(st.integers(1, 16)))] + dims + [f"{draw(st.integers(2, 4))}*{d}" for d in dims] \
                + [f"{d} + 1" for d in dims] + [f"{d} // 2" for d in dims]
            value = draw(st.sampled_from(options))
            _get(spec, p[:-1])[p[-1]] = int(value) if value.isdigit() else value
    elif kind == "divisor":  # a size (or a derived dim) that divides by something that may be 0
        sizes = [p for p in paths if isinstance(_get(spec, p), (str, int)) and not isinstance(_get(spec, p), bool)
                 and p[0] in ("input", "layers", "blocks", "dims")]
        dims = [d for d in spec.get("dims", {}) if isinstance(d, str)] if isinstance(spec.get("dims"), dict) else []
        if sizes:
            p = draw(st.sampled_from(sizes))
            _get(spec, p[:-1])[p[-1]] = _divisor_expr(draw, dims)
    elif kind == "escape":  # control characters / markup in the spec's own name or a layer's name
        names = [p for p in paths if p and p[-1] == "name" and isinstance(_get(spec, p), str)] + [("name",)]
        p = draw(st.sampled_from(names))
        _get(spec, p[:-1])[p[-1]] = str(_get(spec, p)) + draw(st.sampled_from(ESCAPES))
    elif kind == "toggle":  # a bool flipped, an activation / dtype / backend swapped for another valid one
        flips = [p for p in paths if isinstance(_get(spec, p), bool) or _get(spec, p) in ACTS + DTYPES
                 + ("flash", "math")]
        if flips:
            p = draw(st.sampled_from(flips))
            value = _get(spec, p)
            _get(spec, p[:-1])[p[-1]] = (not value if isinstance(value, bool) else draw(st.sampled_from(
                ACTS if value in ACTS else DTYPES if value in DTYPES else ("flash", "math"))))
    else:  # share: put a copy of one subtree somewhere else (blocks in blocks, layers in dims...)
        source = copy.deepcopy(_get(spec, draw(st.sampled_from(paths))))
        if isinstance(parent, list):
            parent.insert(key if isinstance(key, int) else 0, source)
        else:
            parent[key] = source
    return spec


def _layer_lists(spec: dict) -> list[tuple]:
    """Paths of every list of layers (the model's, bodies, branches, blocks')."""
    out = []
    for p in _paths(spec):
        node = _get(spec, p)
        if isinstance(node, list) and node and all(isinstance(x, dict) for x in node) and (
                p in (("layers",),) or (p and p[-1] in ("body", "shortcut", "residual", "layers", "sequence"))
                or (len(p) >= 2 and p[-2] in ("branches", "blocks"))):
            out.append(p)
    return out


def flow_mutate(draw, spec: dict) -> None:
    """Break the dataflow keys: unknown or dropped value names, a save twice, `input:` on the first layer of a
    branch / body, `input:` dropping an unsaved value, joins of shapes that differ, kv to a value of rank 2."""
    lists = _layer_lists(spec)
    layers = [p + (i,) for p in lists for i in range(len(_get(spec, p)))]
    if not layers:
        return
    saves = [p for p in layers if "save" in _get(spec, p)]
    names = [_get(spec, p)["save"] for p in saves] + list(spec.get("inputs") or {}) + ["nope", "B", "input"]
    readers = [p + (k,) for p in layers for k in ("input",) if k in _get(spec, p)] + [
        p + (op, key) for p in layers for op, attrs in _get(spec, p).items()
        if isinstance(attrs, dict) for key in ("with", "kv") if key in attrs]
    what = draw(st.sampled_from(("unknown", "save_twice", "first_input", "drop", "mismatch", "kv_rank2",
                                 "unsave", "unread", "join_key")))
    target = _get(spec, draw(st.sampled_from(layers)))
    if what == "unknown" and readers:
        p = draw(st.sampled_from(readers))
        _get(spec, p[:-1])[p[-1]] = draw(st.sampled_from(names + ["v999", ["nope"], [], 3]))
    elif what == "save_twice" and saves:
        target["save"] = _get(spec, draw(st.sampled_from(saves)))["save"]
    elif what == "first_input":  # the first layer of a body / branch (or the model) reads a value
        first = _get(spec, draw(st.sampled_from(lists)))[0]
        first["input"] = draw(st.sampled_from(names))
    elif what == "drop":  # a layer reads a value, dropping the running value (saved or not)
        target["input"] = draw(st.sampled_from(names))
    elif what == "mismatch":  # a layer appended to one branch / body / shortcut that changes the shape
        forks = [p for p in lists if len(p) >= 2 and (p[-2] == "branches" or p[-1] in ("body", "shortcut"))]
        where = _get(spec, draw(st.sampled_from(forks or lists)))
        where.append(draw(st.sampled_from(({"linear": {"out": 7}}, {"mean": {"axes": [1]}},
                                           {"reshape": {"shape": [-1]}}, {"transpose": {"axis0": 0, "axis1": -1}}))))
    elif what == "kv_rank2":
        spec.setdefault("inputs", {})
        if isinstance(spec["inputs"], dict):
            spec["inputs"]["flat"] = [2, 4]
        attns = [p for p in layers if isinstance(_get(spec, p).get("attention"), dict)]
        if attns:
            _get(spec, draw(st.sampled_from(attns)))["attention"]["kv"] = "flat"
        else:
            target["input"] = "flat"
    elif what == "unsave" and saves:  # the saved value's readers now read nothing
        del _get(spec, draw(st.sampled_from(saves)))["save"]
    elif what == "unread" and readers:  # a saved value that nobody reads
        p = draw(st.sampled_from(readers))
        del _get(spec, p[:-1])[p[-1]]
    else:  # parallel / residual keys broken
        forks = [p for p in _paths(spec) if p and p[-1] in ("parallel", "residual") and isinstance(_get(spec, p), dict)]
        if forks:
            node = _get(spec, draw(st.sampled_from(forks)))
            key = draw(st.sampled_from(("join", "axis", "branches", "body", "shortcut", "extra")))
            node[key] = draw(st.sampled_from(("concat", "mul", "sub", 5, -9, [], [[]], [[], []], None, "x")))


TEXT_EDITS = ("\t", "&a ", "*a", "!!python/object/apply:os.system ['true']", "!!binary AAAA", "\x00", "\xff", "{",
              "}", "[", "]", ":", "- ", "\n  ", "'", '"', "#", "<<: *a\n", "---\n", "%YAML 1.1\n", "é", "\ufeff")


def text_mutate(draw, text: str) -> str | bytes:
    """Byte-level edits of the YAML text: insert, delete or replace a few characters."""
    chars = list(text)
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(chars)))
        op = draw(st.sampled_from(("insert", "delete", "replace")))
        piece = draw(st.one_of(st.sampled_from(TEXT_EDITS), st.text(max_size=3)))
        if op == "insert" or not chars:
            chars.insert(i, piece)
        elif op == "delete":
            del chars[min(i, len(chars) - 1):min(i, len(chars) - 1) + draw(st.integers(1, 8))]
        else:
            chars[min(i, len(chars) - 1)] = piece
    out = "".join(chars)
    if draw(st.floats(0, 1)) < 0.1:  # raw bytes, possibly not UTF-8
        data = bytearray(out.encode("utf-8", "surrogatepass"))
        if data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        return bytes(data)
    return out


@st.composite
def mutated_specs(draw) -> str | bytes:
    """A valid spec with 1-3 structural mutations (a third of the time only soft ones: sizes retargeted,
    flags toggled, numbers changed, items duplicated), sometimes byte edits of its text too."""
    spec = draw(valid_specs())
    kinds = SOFT if draw(st.integers(0, 2)) == 0 else HARD
    for _ in range(draw(st.integers(1, 3))):
        spec = mutate(draw, spec, kinds)
    try:
        text = dump(spec)
    except (yaml.YAMLError, ValueError):
        text = repr(spec)
    if draw(st.floats(0, 1)) < 0.25:
        return text_mutate(draw, text)
    return text
