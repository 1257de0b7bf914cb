"""Hypothesis strategies for the files costspec reads besides specs: GPU catalogs, calibration
files, ncu CSVs (raw and details pages) and their JSON sidecars.

Each strategy draws `(text, valid)`: a valid file of the kind (`valid=True`: it must be
accepted) or one broken by a mutation (`valid=False`: accepted or refused with a
CostspecError, never anything else). Mutations act on the data (a value replaced by a hostile
one: NaN, inf, negative, zero, huge or 5,000-digit numbers, wrong types, deep nesting, non-string
keys; a key deleted, added or renamed) and on the text (alias bombs, YAML tags, a second
document, truncation, random byte edits, a huge line, a deep bracket run).

Used by fuzz/input_properties.py, tests/fuzz/test_inputs.py (bounded, CI) and
fuzz/run_fuzz.py --mode inputs (long runs).
"""
from __future__ import annotations

import copy
import json
from typing import Any

import yaml
from hypothesis import strategies as st

# text a valid file may hold: no control, line-separator, direction-override or zero-width characters (the
# YAML loader refuses them in names, costspec.core.text); surrogates cannot be encoded
_PRINTABLE = st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp", "Cf"))

PUSH_POP = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
METRICS = ("smsp__sass_thread_inst_executed_op_fadd_pred_on.sum", "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
           "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum",
           "sm__ops_path_tensor_src_bf16_dst_fp32.sum", "sm__ops_path_tensor_src_fp16_dst_fp32.sum",
           "dram__bytes_read.sum", "gpu__time_duration.sum", "launch__grid_size", "device__attribute_display_name")
UNITS = ("inst", "", "byte", "Kbyte", "nsecond", "usecond", "cycle", "Mhz", "Gbyte/second", "weird")
RANGES = ("toy", "layers.0.fc", "layers.1.fc", "layers.0.act", "costspec:forward", "costspec:backward", "x:y")
DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp64")

HOSTILE_NUMBER_TEXT = ("1e400", "-1e400", "1e-400", "9" * 5000, "1e999999999999999999", "0e-99999", "1" + ",000" * 200,
                       "NaN", "inf", "-0", "0x1F", "1_000", "１２", "(!) 1e500", "158 (0: 158)", "1.5.5", "", " ")
HOSTILE_VALUES: tuple[Any, ...] = (None, True, False, -1, 0, -0.0, float("nan"), float("inf"), float("-inf"), 1e-300,
                                   1e300, 10**500, "x", "", "1e99999999", "9" * 5000, "1/0", "1/2/3", [], {}, [1, [2]],
                                   {"a": {"b": 1}}, {1: 2}, {"exact": "7/1024"}, "\u202e\x1b]0;x\x07", 2**63, -(2**70),
                                   "train", "backward", {"M": 64}, {"M": "128"}, {"Z": 1})


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


# ----------------------------------------------------------------------------------------------
# Valid documents
# ----------------------------------------------------------------------------------------------
positive = st.one_of(st.integers(1, 10**6), st.floats(1e-3, 1e6, allow_nan=False, allow_infinity=False))
keys = st.from_regex(r"[a-z][a-z0-9_-]{0,10}", fullmatch=True)


@st.composite
def catalog_docs(draw) -> dict:
    gpus = {}
    for key in draw(st.lists(keys, min_size=1, max_size=3, unique=True)):
        entry: dict[str, Any] = {"name": draw(st.text(_PRINTABLE, min_size=1, max_size=20).filter(str.strip)),
                                 "memory_gb": draw(positive), "memory_bw_gbps": draw(positive),
                                 "tensor": {d: draw(positive) for d in draw(st.lists(st.sampled_from(DTYPES),
                                                                                     max_size=4, unique=True))},
                                 # fp32: the CUDA-core peak every pointwise kernel is priced at
                                 "cuda": {d: draw(positive) for d in ["fp32", *draw(st.lists(st.sampled_from(DTYPES),
                                                                                             max_size=2))]}}
        optional = {"arch": st.sampled_from(["ampere", "hopper"]), "compute_capability": st.sampled_from(["8.0", "9.0"]),
                    "sm_count": st.integers(0, 200), "l2_mb": st.integers(0, 100), "boost_clock_mhz": positive,
                    "source": st.lists(st.text(_PRINTABLE, max_size=10), max_size=2)}
        for name in draw(st.lists(st.sampled_from(sorted(optional)), unique=True)):
            entry[name] = draw(optional[name])
        gpus[key] = entry
    return {"version": 1, "gpus": gpus}


# a valid coefficient keeps executed work >= 0: epsilon and kappa >= -1 (p >= -q), rho >= 0
fraction_text = st.integers(1, 10**6).flatmap(lambda q: st.integers(-q, 10**6).map(lambda p: f"{p}/{q}"))
rho_text = st.builds(lambda p, q: f"{p}/{q}", st.integers(0, 10**6), st.integers(1, 10**6))
share_text = st.builds(lambda p: f"{p}/100", st.integers(0, 100))


@st.composite
def calibration_docs(draw) -> dict:
    def coefficient(minimum: float = -0.5, exact_text: st.SearchStrategy = fraction_text):
        return draw(st.one_of(st.floats(minimum, 2, allow_nan=False), exact_text,
                              st.builds(lambda v, e: {"value": v, "exact": e}, st.floats(minimum, 2), exact_text)))

    doc: dict[str, Any] = {"costspec_calibration": 1, "spec": "toy_mlp", "precision": draw(st.sampled_from(DTYPES)),
                           "dims": {"M": draw(st.integers(1, 512)), "D": 1024, "N": 10}}
    for phase in draw(st.lists(st.sampled_from(["forward", "backward"]), min_size=1, unique=True)):
        eps = {c: {"value": 0.0, "exact": draw(fraction_text), "cuda_share": draw(share_text)}
               for c in draw(st.lists(st.sampled_from(["gemm", "conv", "sdpa"]), unique=True))}
        doc[phase] = {"epsilon": eps, "rho": draw(st.one_of(st.none(), st.just(coefficient(0, rho_text)))),
                      "kappa": {k: coefficient() for k in draw(st.lists(st.sampled_from(["sigmoid", "bias_add", "gelu"]),
                                                                         unique=True))},
                      "fused": draw(st.lists(st.sampled_from(["bias_add", "add"]), unique=True)),
                      "outside_flops": draw(st.integers(0, 10**9))}
    return doc


@st.composite
def sidecar_docs(draw) -> dict:
    # valid for the forward-only toy CSV it is paired with (a mutation may make it train / backward)
    doc: dict[str, Any] = {"costspec_ncu_sidecar": 1, "spec": "specs/toy_mlp.yaml", "pass": "forward",
                           "dtype": draw(st.sampled_from(DTYPES))}
    if draw(st.booleans()):
        doc["bind"] = {"M": 128}
    if draw(st.booleans()):
        doc["dims"] = {"M": 128, "D": 1024, "N": 10}
    if draw(st.booleans()):
        doc["gpu"] = draw(st.text(_PRINTABLE, max_size=20))
    return doc


def _q(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


cell_numbers = st.one_of(st.integers(0, 10**12).map(lambda n: f"{n:,}"), st.integers(0, 10**6).map(str),
                         st.decimals(0, 10**6, places=3, allow_nan=False).map(str),
                         st.sampled_from(["n/a", "(!) n/a", "", "158 (0: 158)", "0"]))


@st.composite
def ncu_csvs(draw) -> str:
    """A raw page (one row per kernel, a units row) or a details page (one row per metric)."""
    metrics = draw(st.lists(st.sampled_from(METRICS), min_size=1, max_size=5, unique=True))
    kernels = draw(st.lists(st.tuples(st.sampled_from(["ampere_sgemm_64x32", "vectorized_elementwise_kernel",
                                                       "reduce_kernel"]),
                                      st.lists(st.sampled_from(RANGES), max_size=3)), min_size=1, max_size=6))

    def nvtx(stack) -> str:
        return ("4242  " + "  ".join(f'"<default domain>:{r}:none:none:none:none:none:none"' for r in stack)
                if stack else "")

    lines = [draw(st.sampled_from(["", "==PROF== Connected to process 4242", "some program output"]))]
    if draw(st.booleans()):  # raw page
        lines.append(",".join(_q(c) for c in ["ID", "Kernel Name", PUSH_POP, *metrics]))
        lines.append(",".join(_q(c) for c in ["", "", "", *(draw(st.sampled_from(UNITS)) for _ in metrics)]))
        for i, (name, stack) in enumerate(kernels):
            lines.append(",".join(_q(c) for c in [str(i), name, nvtx(stack), *(draw(cell_numbers) for _ in metrics)]))
    else:
        lines.append(",".join(_q(c) for c in ["ID", "Kernel Name", PUSH_POP, "Metric Name", "Metric Unit",
                                              "Metric Value"]))
        for i, (name, stack) in enumerate(kernels):
            for metric in metrics:
                lines.append(",".join(_q(c) for c in [str(i), name, nvtx(stack), metric, draw(st.sampled_from(UNITS)),
                                                      draw(cell_numbers)]))
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# Mutations
# ----------------------------------------------------------------------------------------------
def _paths(value: Any, path: tuple = ()) -> list[tuple]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, path + (i,))
    return out


@st.composite
def mutated_data(draw, doc: dict) -> Any:
    """`doc` with one to three edits at random places."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            return copy.deepcopy(draw(st.sampled_from(HOSTILE_VALUES)))
        path = draw(st.sampled_from(paths))
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        action = draw(st.sampled_from(["replace", "replace", "replace", "delete", "add", "rename", "deep"]))
        if action == "replace":  # a copy: a later edit must not change the shared constant
            parent[last] = copy.deepcopy(draw(st.sampled_from(HOSTILE_VALUES)))
        elif action == "delete" and isinstance(parent, dict):
            del parent[last]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.one_of(keys, st.integers(), st.booleans()))] = copy.deepcopy(
                draw(st.sampled_from(HOSTILE_VALUES)))
        elif action == "rename" and isinstance(parent, dict):
            parent[draw(keys)] = parent.pop(last)
        elif action == "deep":
            parent[last] = _deep(draw(st.sampled_from([10, 40, 70, 200])))
    return doc


ALIAS_BOMB = ("a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
              "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
              "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n")
YAML_INSERTS = (ALIAS_BOMB, "x: !!python/object/apply:os.system ['touch PWNED']\n", "x: !!float\n", "---\na: 1\n",
                "x: &x [*x]\n", "<<: {gpus: 1}\n", "x: 2001-01-01\n", "x: !!binary aGVsbG8=\n", "x: !custom 1\n",
                "x: *undefined\n", "x: \"\\U00110000\"\n", "\ufeffx: 1\n", "x: 1\nx: 2\n", "x: " + "[" * 80 + "]" * 80 + "\n")


@st.composite
def text_edits(draw, text: str, inserts: tuple[str, ...]) -> str | bytes:
    """`text` with a line inserted, truncated, or random bytes changed."""
    action = draw(st.sampled_from(["insert", "truncate", "bytes", "long_line", "nul"]))
    if action == "insert":
        lines = text.split("\n")
        at = draw(st.integers(0, len(lines)))
        return "\n".join(lines[:at] + [draw(st.sampled_from(inserts)).rstrip("\n")] + lines[at:])
    if action == "truncate":
        return text[: draw(st.integers(0, len(text)))]
    if action == "long_line":
        return text + "\n" + "x" * draw(st.sampled_from([1000, 140_000])) + "\n"
    if action == "nul":
        at = draw(st.integers(0, len(text)))
        return text[:at] + "\x00" + text[at:]
    data = bytearray(text.encode("utf-8"))
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        data[at] = draw(st.integers(0, 255))
    return bytes(data)


def _yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120)


def _kind_texts(docs: st.SearchStrategy, dump, inserts: tuple[str, ...]) -> st.SearchStrategy:
    """(text, valid) pairs: a valid document, a data mutation, or a text edit of either."""

    @st.composite
    def draw_one(draw):
        doc = draw(docs)
        choice = draw(st.integers(0, 9))
        if choice < 2:
            return dump(doc), True
        if choice < 7:
            return dump(draw(mutated_data(doc))), False
        base = dump(doc if choice < 9 else draw(mutated_data(doc)))
        return draw(text_edits(base, inserts)), False

    return draw_one()


def _json(data: Any) -> str:
    return json.dumps(data, indent=1, default=str)


JSON_INSERTS = ("[" * 100 + "]" * 100, "NaN", "1e400", "9" * 5000, "Infinity", '"\\ud800"', "{", "]", '"a": 1,')
CSV_INSERTS = ("==PROF== Disconnected", "", '"1","k"', '"ID","Kernel Name","x"', '"0","k","' + "1" * 140_000 + '"',
               '"unterminated', ",".join(['"x"'] * 3000), '"0","k","4242  ""<bad"""', *(f'"9","k","","{v}"'
                                                                                          for v in HOSTILE_NUMBER_TEXT))


def catalog_texts() -> st.SearchStrategy:
    return _kind_texts(catalog_docs(), _yaml, YAML_INSERTS)


def calibration_texts() -> st.SearchStrategy:
    return _kind_texts(calibration_docs(), _yaml, YAML_INSERTS)


def sidecar_texts() -> st.SearchStrategy:
    return _kind_texts(sidecar_docs(), _json, JSON_INSERTS)


@st.composite
def _csv_texts(draw):
    text = draw(ncu_csvs())
    choice = draw(st.integers(0, 9))
    if choice < 2:
        return text, True
    if choice < 6:  # a hostile value in one metric cell
        lines = text.split("\n")
        rows = [i for i, line in enumerate(lines) if line.startswith('"') and not line.startswith('"ID"')]
        if rows:
            i = draw(st.sampled_from(rows))
            cells = lines[i].split('","')
            j = draw(st.integers(0, len(cells) - 1))
            cells[j] = draw(st.sampled_from(HOSTILE_NUMBER_TEXT)).replace('"', "")
            lines[i] = '","'.join(cells)
            if not lines[i].startswith('"'):
                lines[i] = '"' + lines[i]
            if not lines[i].endswith('"'):
                lines[i] += '"'
        return "\n".join(lines), False
    if choice < 7:  # another line ending: CR alone (old Mac), CRLF (Windows), or mixed
        ending = draw(st.sampled_from(["\r", "\r\n"]))
        return (text.replace("\n", ending) if draw(st.booleans()) else text.replace("\n", ending, 2)), False
    return draw(text_edits(text, CSV_INSERTS)), False


def csv_texts() -> st.SearchStrategy:
    return _csv_texts()


STRATEGIES = {"catalog": catalog_texts, "calibration": calibration_texts, "csv": csv_texts, "sidecar": sidecar_texts}
