"""Generate reference docs from the code, so they cannot drift from it.

    python tools/gen_docs.py            # writes docs/ops.md (drift-tested by tests/docs/test_reference.py)
    python tools/gen_docs.py --cli      # also writes docs/cli.md: every command's options from click,
                                        # with real output of the zoo specs (not drift-tested: the
                                        # output changes whenever the numbers do)
    python tools/gen_docs.py --check    # exit 1 if docs/ops.md is not what this script writes

docs/ops.md holds, for every op in the registry (`costspec.ops.OPS`): its doc line and class
docstring, its attributes (kind, default, doc from `Attr`), the docstrings of its forward /
backward / traffic / reconcile methods, a sample use evaluated symbolically (the work its
forward and backward produce, by part, exactly as the engine computes it), and the cost-table
kinds it emits with their FLOPs per element and reasons (costspec/data/cost_table.yaml).
"""
from __future__ import annotations

import argparse
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import sympy  # noqa: E402
import yaml  # noqa: E402

import costspec  # noqa: E402
from costspec.core.cost_table import default_table  # noqa: E402
from costspec.core.errors import CostspecError  # noqa: E402
from costspec.ops import OPS, spec_ops  # noqa: E402
from costspec.ops.attrs import ATTR_SCHEMAS as ATTR_KINDS  # noqa: E402
from costspec.ops.attrs import REQUIRED  # noqa: E402
from costspec.ops.opdef import OpDef  # noqa: E402

OPS_MD = ROOT / "docs" / "ops.md"
CLI_MD = ROOT / "docs" / "cli.md"

# Sample uses: dims as symbols with small defaults (so every constraint holds), required attributes
# named after what they are. An op is shown on the first input shape it accepts.
SAMPLE_DIMS = {"B": 2, "S": 16, "C": 8, "H": 8, "W": 8, "T": 4, "M": 4, "K": 8, "N": 4, "F": 16, "h": 2, "p": 2, "D": 8,
               "V": 32, "k": 3}
SAMPLE_SHAPES = (["B", "S", "C"], ["B", "C", "H", "W"], ["M", "K"], ["B", "S"], ["B", "C", "T", "H", "W"])
LEADING_SHAPES = (["B", "S"],)
SAMPLE_ATTRS = {"out": "N", "hidden": "F", "heads": "h", "patch": "p", "dim": "D", "vocab": "V", "kernel": "k",
                "shape": ["B", -1], "axis0": 1, "axis1": 2}
SHAPE_NAMES = {"B": "batch", "S": "tokens", "C": "channels / width", "H": "height", "W": "width", "M": "rows",
               "K": "input features", "T": "frames"}


# ----------------------------------------------------------------------------------------------
# Pieces
# ----------------------------------------------------------------------------------------------
def _doc(obj) -> str:
    """The object's own docstring (not an inherited one), dedented; "" when it has none."""
    text = obj.__doc__ if isinstance(obj.__doc__, str) else ""
    return inspect.cleandoc(text) if text else ""


def _own_method(op: OpDef, name: str):
    """The op's `name` method if its class (or an intermediate base) defines it, else None."""
    for cls in type(op).__mro__:
        if cls is OpDef:
            return None
        if name in cls.__dict__:
            return cls.__dict__[name]
    return None


def _leading(op: OpDef) -> bool:
    return _own_method(op, "example_input") is not None


def _default(attr) -> str:
    if attr.default is REQUIRED:
        return "**required**"
    if callable(attr.default):
        return "from the input (see doc)"
    if isinstance(attr.default, bool):
        return "`true`" if attr.default else "`false`"
    return f"`{attr.default}`"


def _kind(attr) -> str:
    if attr.kind == "choice":
        return "one of " + ", ".join(f"`{c}`" for c in attr.choices)
    return f"{attr.kind} ({ATTR_KINDS[attr.kind][1]})" if attr.kind in ATTR_KINDS else attr.kind


def _sample_attrs(op: OpDef) -> dict:
    out = {}
    for attr in op.attrs:
        if attr.default is not REQUIRED:
            continue
        if attr.name in SAMPLE_ATTRS:
            out[attr.name] = SAMPLE_ATTRS[attr.name]
        elif attr.kind == "choice":
            out[attr.name] = attr.choices[0]
        else:
            out[attr.name] = {"bool": True, "number": 0.5, "axis": -1, "count": 1, "pair": "k",
                              "shape": [-1]}.get(attr.kind, "N")
    return out


def _sample(op: OpDef):
    """(spec layer, input shape, op node) of a sample use of `op`, or None if none loads."""
    attrs = _sample_attrs(op)
    for shape in LEADING_SHAPES if _leading(op) else SAMPLE_SHAPES:
        spec = {"costspec": 1, "name": "sample", "dims": SAMPLE_DIMS, "input": shape,
                "layers": [{op.name: attrs or None}]}
        try:
            model = costspec.loads(yaml.safe_dump(spec, sort_keys=False))
        except CostspecError:
            continue
        node = next(model.op_nodes())
        return {op.name: attrs}, shape, node
    return None


def _expr(e) -> str:
    e = sympy.sympify(e)
    return str(_positive_factors(sympy.factor(e))) if e.free_symbols else str(e)


def _positive_factors(e):
    """factor() writes an output size H - k + 1 as (-H + k - 1) and lets the signs of two such factors
    cancel; flip each such factor (and its power) so sizes read as they are, the sign kept in front."""
    if not e.is_Mul:
        return e
    sign, args = 1, []
    for arg in e.args:
        base, exp = (arg.base, arg.exp) if arg.is_Pow else (arg, sympy.Integer(1))
        if arg.is_Number and arg < 0:
            sign, arg = -sign, -arg
        elif base.is_Add and base.could_extract_minus_sign() and exp.is_Integer:
            sign *= (-1) ** int(exp)
            arg = sympy.Pow(-base, exp, evaluate=False) if exp != 1 else -base
        if arg != 1:
            args.append(arg)
    if sign < 0:
        args.insert(0, sympy.Integer(-1))
    return sympy.Mul(*args, evaluate=False)


def _work_lines(parts, with_params: bool) -> list[str]:
    lines = []
    for part in parts:
        name = f"`{part.name}`" if part.name else "(the op)"
        items = [f"{cls} FLOPs = `{_expr(v)}`" for cls, v in sorted(part.work.matmul.items())]
        items += [f"`{kind}` x `{_expr(v)}` elements" for kind, v in sorted(part.work.pointwise.items())]
        if with_params and sympy.sympify(part.params) != 0:
            items.append(f"params = `{_expr(part.params)}`")
        lines.append(f"| {name} | {'; '.join(items) or 'no work'} |")
    return lines


def _traffic_lines(op: OpDef, call, pass_: str, input_grad: bool) -> list[str]:
    try:
        traffic = op.traffic(call, pass_, input_grad, "default")
    except NotImplementedError as exc:
        return [f"| - | not defined: {exc} |"]
    return [f"| {'`' + t.part + '`' if t.part else '(the op)'} | reads `{_expr(t.reads)}`, writes `{_expr(t.writes)}` |"
            for t in traffic]


def _kinds(node) -> list[str]:
    kinds = set()
    for part in node.op.forward(node.call):
        kinds |= set(part.work.pointwise)
    for grad in (True, False):
        for part in node.op.backward(node.call, grad):
            kinds |= set(part.work.pointwise)
    return sorted(kinds)


def _quote(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in text.splitlines())


def op_section(name: str, op: OpDef, table: dict) -> str:
    out = [f"## `{name}`", "", op.doc, ""]
    if _doc(type(op)) and _doc(type(op)) != op.doc:
        out += [_quote(_doc(type(op))), ""]
    facts = [f"default layer name `{op.default_name}`"]
    if not op.in_spec:
        facts.append("inserted by the engine, not written in specs")
    if op.fusable:
        facts.append("`--fusion aggressive` folds it into its producer's epilogue")
    if _leading(op):
        facts.append("reads the model input itself (first layer only)")
    out += ["Facts: " + "; ".join(facts) + ".", ""]
    if op.attrs:
        out += ["| attribute | kind | default | doc |", "|---|---|---|---|"]
        out += [f"| `{a.name}` | {_kind(a)} | {_default(a)} | {a.doc} |" for a in op.attrs]
    else:
        out.append("No attributes.")
    out.append("")
    methods = []
    for method in ("output_shape", "constraints", "forward", "backward", "traffic", "reconcile"):
        fn = _own_method(op, method)
        if fn is not None and _doc(fn):
            methods.append(f"* **{method}**: " + _doc(fn).replace("\n", "\n  "))
    if methods:
        out += ["What its methods say:", ""] + methods + [""]
    sample = _sample(op) if op.in_spec else None
    if sample is not None:
        layer, shape, node = sample
        call = node.call
        out += [f"Sample use, evaluated symbolically by the engine: `{yaml.safe_dump(layer, default_flow_style=True).strip()}` "
                f"on input `[{', '.join(shape)}]` -> output `[{', '.join(str(d) for d in node.out_shape)}]`.", "",
                "| part | forward work |", "|---|---|", *_work_lines(op.forward(call), True), "",
                "| part | backward work, input needs a gradient (dX computed) |", "|---|---|",
                *_work_lines(op.backward(call, True), False), "",
                "| part | backward work, input needs no gradient (first layer) |", "|---|---|",
                *_work_lines(op.backward(call, False), False), "",
                "| part | memory traffic, forward (elements; x bytes per element of the precision) |", "|---|---|",
                *_traffic_lines(op, call, "forward", True), "",
                "| part | memory traffic, backward with dX (elements) |", "|---|---|",
                *_traffic_lines(op, call, "backward", True), ""]
        kinds = _kinds(node)
        if kinds:
            out += ["Cost-table kinds it emits (CUDA-core FLOPs per element, overridable with `costs:`):", "",
                    "| kind | FLOPs/element | reason |", "|---|---|---|"]
            out += [f"| `{k}` | {table[k]['flops']} | {table[k]['reason']} |" for k in kinds if k in table]
            out.append("")
    elif op.in_spec:
        out += ["(No sample use could be evaluated on the standard shapes.)", ""]
    return "\n".join(out)


def ops_markdown() -> str:
    """The whole of docs/ops.md."""
    table = default_table()
    names = sorted(OPS)
    spec_names = [n for n in names if OPS[n].in_spec]
    head = textwrap.dedent("""\
        # Op reference

        <!-- GENERATED by tools/gen_docs.py from the op registry and costspec/data/cost_table.yaml.
             Do not edit by hand: run `python tools/gen_docs.py`. tests/docs/test_reference.py fails on drift. -->

        Every op costspec knows, as registered in `costspec.ops.OPS`. A layer names one op as its key:
        `- linear: {out: 3072}`. Work is engine-neutral here: **matmul-class FLOPs** by class (`gemm`,
        `conv`, `sdpa`; 2 FLOPs per multiply-add) go to Tensor Cores when the layer's precision allows
        (fp16, bf16, fp8, tf32) and to CUDA cores in plain fp32; **pointwise kinds** count elements, each
        priced at the cost table's FLOPs per element on CUDA cores. See [conventions](conventions.md).

        The sample uses below are computed by the engine from each op's definition on symbolic shapes
        (sample dims: B batch, S tokens, C channels, H x W image, M rows, K features; required
        attributes as N out, F hidden, h heads, p patch, D dim, V vocab, k kernel).
        """)
    index = ["| op | what it is |", "|---|---|"] + [f"| [`{n}`](#{n.replace('_', '_')}) | {OPS[n].doc} |"
                                                   for n in spec_names]
    engine = [n for n in names if not OPS[n].in_spec]
    parts = [head, "\n".join(index), ""]
    if engine:
        parts.append("Engine-internal ops (not written in specs): " + ", ".join(f"`{n}`" for n in engine) + ".\n")
    parts += [op_section(n, OPS[n], table) for n in spec_names + engine]
    kinds = ["## The cost table", "", "All kinds in `costspec/data/cost_table.yaml` (CUDA-core FLOPs per element):", "",
             "| kind | FLOPs/element | reason |", "|---|---|---|"]
    kinds += [f"| `{k}` | {v['flops']} | {v['reason']} |" for k, v in table.items()]
    parts.append("\n".join(kinds))
    return "\n".join(parts).rstrip() + "\n"


# ----------------------------------------------------------------------------------------------
# CLI reference (options from click, output from the zoo)
# ----------------------------------------------------------------------------------------------
CLI_EXAMPLES = {
    "check": [["check", "specs/vit_b.yaml", "specs/toy_mlp.yaml"]],
    "eval": [["eval", "specs/vit_b.yaml", "--batch", "8", "--depth", "2"],
             ["eval", "specs/toy_mlp.yaml", "--pass", "train", "--format", "csv"],
             ["eval", "specs/vit_b.yaml", "--batch", "8", "--gpu", "h100-sxm", "--depth", "1"],
             ["eval", "specs/llama_1b.yaml", "--phase", "decode", "--context", "2048", "--batch", "8", "--gpu",
              "h100-sxm", "--depth", "1"]],
    "memory": [["memory", "specs/llama_1b.yaml", "--phase", "decode", "--context", "2048", "--batch", "8", "--gpu",
                "h100-sxm"],
               ["memory", "specs/llama_1b.yaml", "--pass", "train", "--optimizer", "adamw", "--master-weights"]],
    "formula": [["formula", "specs/vit_b.yaml", "--keep", "B,S,C"]],
    "gpus": [["gpus"]],
    "latex": [["latex", "specs/toy_mlp.yaml"]],
    "sweep": [["sweep", "specs/vit_b.yaml", "--vary", "B=1..8:x2", "--vary", "img=224,384"],
              ["sweep", "specs/vit_b.yaml", "--vary", "B=1..64:x4", "--gpu", "h100-sxm", "--format", "table"]],
    "report": [["report", "vit_b", "--gpu", "h100-sxm", "--vary", "B=1..256:x2", "-o", "/tmp/vit_b_report.html"]],
    "zoo": [["zoo"]],
    "torch": [["torch", "specs/vit_b.yaml", "--depth", "3"]],
    "validate": [["validate", "specs/vit_b.yaml", "--batch", "2", "--pass", "train"]],
    "roofline": [["roofline", "specs/vit_b.yaml", "--gpu", "h100-sxm", "--batch", "8", "-o", "/tmp/vit_b.png"]],
    "time": [["time", "specs/vit_b.yaml", "--batch", "8"]],
    "ncu": [["ncu", "compare", "specs/toy_mlp.yaml", "tests/data/ncu/toy_forward.details.csv"]],
}


def _commands():
    import costspec.cli as cli

    cli.register_all()
    return cli.cli


def _option_rows(command) -> list[str]:
    import click

    rows = ["| option | type | default | help |", "|---|---|---|---|"]
    for p in command.params:
        if isinstance(p, click.Argument):
            rows.append(f"| `{p.human_readable_name}` (argument) | {p.type.name} | | "
                        f"{'required' if p.required else 'optional'}{', repeatable' if p.nargs == -1 else ''} |")
            continue
        names = ", ".join(f"`{o}`" for o in p.opts + p.secondary_opts)
        if p.is_flag:
            kind = "flag"
        elif hasattr(p.type, "choices"):
            kind = " / ".join(p.type.choices)
        elif hasattr(p.type, "_describe_range"):
            kind = f"{p.metavar or p.type.name} ({p.type._describe_range()})"
        else:
            kind = p.metavar or p.type.name
        plain = isinstance(p.default, (str, int, float)) and not isinstance(p.default, bool)
        default = f"`{p.default}`" if plain else ""
        extra = ", required" if p.required else ""
        extra += ", repeatable" if p.multiple else ""
        rows.append(f"| {names} | {kind}{extra} | {default} | {(p.help or '').replace('|', '/')} |")
    return rows


def _run(args: list[str]) -> str:
    result = subprocess.run([sys.executable, "-m", "costspec", *args], cwd=ROOT, capture_output=True, text=True,
                            timeout=600)
    text = (result.stdout + result.stderr).rstrip()
    lines = text.splitlines()
    if len(lines) > 60:
        text = "\n".join(lines[:45] + [f"... ({len(lines) - 55} lines cut) ..."] + lines[-10:])
    return f"$ costspec {' '.join(args)}\n{text}\n" + (f"[exit {result.returncode}]\n" if result.returncode else "")


def cli_markdown() -> str:
    import click

    group = _commands()
    out = [textwrap.dedent("""\
        # Command-line reference

        <!-- Option tables GENERATED from the click commands by `python tools/gen_docs.py --cli`, with the
             output of real runs on the zoo specs (specs/*.yaml) pasted below each. Regenerate after
             changing a command. -->

        `costspec COMMAND [OPTIONS] ...`. Exit codes: 0 success; 1 a validation mismatch (`validate`,
        `ncu compare`); 2 bad input or usage (a spec error prints one line `file:line:col: $.path: what
        (expected ...)`); 3 an internal error (a bug: please report; `COSTSPEC_DEBUG=1` shows the
        traceback). Tables go to stdout; `--format json|csv` gives exact integers. `eval`, `formula`,
        `latex`, `sweep`, `check` and `gpus` never import torch.
        """)]
    out.append("| command | what it does |\n|---|---|")
    out.append("\n".join(f"| [`{n}`](#costspec-{n}) | {c.get_short_help_str(200)} |"
                         for n, c in sorted(group.commands.items())))
    out.append("")
    for name, command in sorted(group.commands.items()):
        out += [f"## costspec {name}", "", inspect.cleandoc(command.help) if command.help else "", ""]
        commands = [(name, command)]
        if isinstance(command, click.Group):
            commands = [(f"{name} {sub}", c) for sub, c in sorted(command.commands.items())]
            page = {"import": "import.md"}.get(name, "ncu.md")  # the docs page of each command group
            out += ["Subcommands: " + ", ".join(f"`{n}`" for n, _ in commands) + f". See also [{page}]({page}).", ""]
        for full, cmd in commands:
            if full != name:
                out += [f"### costspec {full}", "", (cmd.help or "").strip(), ""]
            out += _option_rows(cmd) + [""]
        for args in CLI_EXAMPLES.get(name, []):
            out += ["```", _run(args).rstrip(), "```", ""]
    return "\n".join(out).rstrip() + "\n"


README_MD = ROOT / "README.md"
README_BEGIN = "<!-- ops:begin (generated by tools/gen_docs.py from the op registry; do not edit) -->"
README_END = "<!-- ops:end -->"


def readme_ops_block() -> str:
    """The README's op list, one line per op family (the module or package of costspec.ops that defines
    it), from the registry."""
    families: dict[str, list[str]] = {}
    for name, op in spec_ops().items():
        families.setdefault(type(op).__module__.split(".")[2], []).append(name)
    lines = [f"  * {module.replace('_', ' ')}: " + ", ".join(f"`{n}`" for n in sorted(names))
             for module, names in sorted(families.items())]
    return "\n".join([README_BEGIN, *lines, README_END])


def readme_with_ops(text: str) -> str:
    """`text` (the README) with its marked op list replaced by readme_ops_block()."""
    start, end = text.index(README_BEGIN), text.index(README_END) + len(README_END)
    return text[:start] + readme_ops_block() + text[end:]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", action="store_true", help="also regenerate docs/cli.md (runs the zoo, slow)")
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/ops.md is stale")
    args = parser.parse_args(argv)
    text = ops_markdown()
    if args.check:
        stale = not OPS_MD.exists() or OPS_MD.read_text(encoding="utf-8") != text
        print("docs/ops.md is stale: run python tools/gen_docs.py" if stale else "docs/ops.md is up to date")
        return int(stale)
    OPS_MD.write_text(text, encoding="utf-8")
    print(f"wrote {OPS_MD}")
    readme = README_MD.read_text(encoding="utf-8")
    if readme_with_ops(readme) != readme:
        README_MD.write_text(readme_with_ops(readme), encoding="utf-8")
        print(f"wrote the op list in {README_MD}")
    if args.cli:
        CLI_MD.write_text(cli_markdown(), encoding="utf-8")
        print(f"wrote {CLI_MD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
