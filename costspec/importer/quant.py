"""A config's `quantization_config` as the spec's weight precision (`precision: {weights, group, compute}`,
docs/conventions.md "Quantised weights"), the same for every family; or an ImportProblem naming the key and
why the method's stored bytes are not one of costspec's weight formats.

Mapped: AWQ and GPTQ 4-bit (`int4`: packed values, an fp16 scale and a 4-bit zero point per group along k),
bitsandbytes 4-bit NF4 (`nf4`, an fp32 absmax per block of 64), FBGEMM fp8 (`fp8`, an fp32 scale per output
row; activations quantised per row: fp8 GEMMs) and compressed-tensors symmetric int8 (`int8`, a 16-bit scale
per group or output row). The weight matrices of the GEMMs are quantised; embeddings, norms and biases stay at
the compute dtype (the format's rule); the LM head keeps its weight (`precision: {weights: none}`) unless the
method quantises it (compressed-tensors without lm_head in `ignore`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from costspec.importer.config import MAX_CONFIG_INT, TORCH_DTYPE_NAMES, HFConfig, ImportProblem

KEY = "quantization_config"
PER_ROW = MAX_CONFIG_INT  # a group at least as long as any k: one scale per output row
BNB_BLOCK = 64  # bitsandbytes' quantize_4bit blocksize (transformers' Linear4bit does not change it)
# modules a method may keep unquantised that the spec keeps unquantised anyway (embedding tables) or by name
# (the LM head)
KEPT_ANYWAY = ("embed_tokens", "wte", "wpe", "embed_in", "word_embeddings")
HEADS = ("lm_head", "embed_out")
_PRECISION = re.compile(r"^precision: \{dtype: ([a-z0-9_]+)\}(.*)$")


@dataclass(frozen=True)
class Weights:
    """What a quantization_config stores: the weight format and group, the dtype its GEMMs run at (None: the
    spec's dtype), whether the LM head is quantised too, and the comment the precision line carries."""

    weights: str
    group: int
    compute: str | None
    head: bool
    why: str


def quantisation(cfg: HFConfig) -> Weights | None:
    """The weight precision of the config's quantization_config (None: it has none)."""
    q = cfg.get(KEY)
    if q is None:
        return None
    if not isinstance(q, dict):
        raise cfg.refuse(KEY, "expected an object with quant_method")
    method = q.get("quant_method")
    if method is None and (q.get("load_in_4bit") or q.get("load_in_8bit")):
        method = "bitsandbytes"  # configs written before quant_method was saved
    reader = METHODS.get(str(method))
    if reader is None:
        raise refuse(cfg, "quant_method", f"{method!r} is not a weight format costspec prices (mapped: "
                     f"{', '.join(METHODS)}; {REFUSED.get(str(method), 'its stored bytes are not modelled')})")
    return reader(cfg, q)


def refuse(cfg: HFConfig, key: str, why: str) -> ImportProblem:
    return ImportProblem(f"{cfg.where(KEY)}.{key}: {why}")


def _number(q: dict, key: str, default: Any) -> Any:
    value = q.get(key, default)
    return default if value is None else value


def _group(cfg: HFConfig, q: dict, key: str, default: int) -> int:
    group = _number(q, key, default)
    if group == -1:
        return PER_ROW
    if isinstance(group, bool) or not isinstance(group, int) or group < 1:
        raise refuse(cfg, key, f"{group!r}: expected a positive whole number or -1 (one group per row)")
    return group


def _kept(cfg: HFConfig, q: dict, key: str, head_default: bool = False) -> bool:
    """Whether the LM head is quantised: False when `key` (modules_to_not_convert, ignore) names it or by the
    method's default; a name the spec cannot keep unquantised on its own (a router inside the moe op) is refused."""
    names = q.get(key)
    if names is None:
        return head_default
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise refuse(cfg, key, f"{names!r}: expected a list of module names")
    head = head_default
    for name in names:
        last = name.rsplit(".", 1)[-1].removeprefix("re:")
        if last in HEADS:
            head = False
        elif last not in KEPT_ANYWAY:
            raise refuse(cfg, key, f"{name!r}: the importer keeps only the LM head out of the quantised weights "
                         "(every other GEMM of the spec, a router inside the moe op included, shares the one "
                         "weight precision)")
    return head


def _dtype(cfg: HFConfig, q: dict, key: str, default: str | None) -> str | None:
    name = q.get(key)
    if name is None:
        return default
    if name not in TORCH_DTYPE_NAMES:
        raise refuse(cfg, key, f"{name!r}: expected one of {', '.join(TORCH_DTYPE_NAMES)}")
    return TORCH_DTYPE_NAMES[name]


def _awq(cfg: HFConfig, q: dict) -> Weights:
    bits = _number(q, "bits", 4)
    if bits != 4:
        raise refuse(cfg, "bits", f"{bits!r}: AWQ's {bits}-bit weights are not a costspec format (int4 only)")
    if not _number(q, "zero_point", True):
        raise refuse(cfg, "zero_point", "false: int4 stores a 4-bit zero point per group (AWQ's default); "
                     "without it the bytes differ")
    if _number(q, "do_fuse", False):
        raise refuse(cfg, "do_fuse", "true: AWQ's fused modules replace the attention and MLP (another module tree)")
    group = _group(cfg, q, "group_size", 128)
    _kept(cfg, q, "modules_to_not_convert")
    return Weights("int4", group, None, False, f"AWQ 4-bit, group_size {q.get('group_size', 128)}, with zero points")


def _gptq(cfg: HFConfig, q: dict) -> Weights:
    bits = _number(q, "bits", 4)
    if bits != 4:
        raise refuse(cfg, "bits", f"{bits!r}: GPTQ's {bits}-bit weights (with {bits}-bit zero points) are not a "
                     "costspec format (int4 only)")
    if q.get("modules_in_block_to_quantize"):
        raise refuse(cfg, "modules_in_block_to_quantize", "only some modules of each block quantised: the importer "
                     "quantises every GEMM of the blocks")
    group = _group(cfg, q, "group_size", 128)
    _kept(cfg, q, "modules_to_not_convert")
    return Weights("int4", group, None, False, f"GPTQ 4-bit, group_size {q.get('group_size', 128)} (qweight, "
                   "scales, qzeros; g_idx not counted)")


def _bitsandbytes(cfg: HFConfig, q: dict) -> Weights:
    if q.get("load_in_8bit"):
        raise refuse(cfg, "load_in_8bit", "true: LLM.int8 keeps an fp32 scale per row and runs outlier columns "
                     "(llm_int8_threshold) as an fp16 GEMM chosen from the activations: data-dependent work and "
                     "bytes no weight format describes")
    if not q.get("load_in_4bit"):
        raise refuse(cfg, "load_in_4bit", "expected load_in_4bit or load_in_8bit true")
    kind = q.get("bnb_4bit_quant_type", "fp4")
    if kind != "nf4":
        raise refuse(cfg, "bnb_4bit_quant_type", f"{kind!r}: costspec prices NF4 (nf4); bitsandbytes' FP4 is not "
                     "one of its formats")
    if q.get("bnb_4bit_use_double_quant"):
        raise refuse(cfg, "bnb_4bit_use_double_quant", "true: the absmax stored as 8-bit with a second-level fp32 "
                     "scale per 256 blocks: nf4 counts an fp32 absmax per block (double quantisation not modelled)")
    _kept(cfg, q, "llm_int8_skip_modules")
    compute = _dtype(cfg, q, "bnb_4bit_compute_dtype", "fp32")
    return Weights("nf4", BNB_BLOCK, compute, False, "bitsandbytes 4-bit NF4 (an fp32 absmax per 64 values), "
                   f"computing in {compute} (bnb_4bit_compute_dtype)")


def _fbgemm_fp8(cfg: HFConfig, q: dict) -> Weights:
    _kept(cfg, q, "modules_to_not_convert")
    return Weights("fp8", PER_ROW, "fp8", False, "FBGEMM fp8: e4m3 weights with an fp32 scale per output row "
                   "(group: any length >= k), activations quantised per row: fp8 GEMMs")


def _fine_grained_fp8(cfg: HFConfig, q: dict) -> Weights:
    block = q.get("weight_block_size")
    raise refuse(cfg, "weight_block_size", f"{block!r}: one fp32 scale per {block} block of each weight "
                 "(ceil(n/bn)*ceil(k/bk) scales); costspec's fp8 format keeps one scale per group along k of each "
                 "output row (n*ceil(k/G)), which no group reproduces: the bytes would differ")


def _compressed(cfg: HFConfig, q: dict) -> Weights:
    if q.get("kv_cache_scheme") is not None:
        raise refuse(cfg, "kv_cache_scheme", "a quantised KV cache: the importer maps weights only")
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or len(groups) != 1:
        raise refuse(cfg, "config_groups", "expected one group (the importer applies one weight precision)")
    (name, group), = groups.items()
    where = f"config_groups.{name}"
    targets = group.get("targets") if isinstance(group, dict) else None
    if targets != ["Linear"]:
        raise refuse(cfg, f"{where}.targets", f"{targets!r}: expected [\"Linear\"] (every linear layer)")
    w = group.get("weights") or {}
    kind, bits, strategy = w.get("type"), w.get("num_bits"), w.get("strategy")
    if kind != "int" or bits != 8 or not w.get("symmetric", True):
        shape = f"{kind} {bits}-bit{'' if w.get('symmetric', True) else ' asymmetric'}"
        raise refuse(cfg, f"{where}.weights", f"{shape}: mapped are symmetric int 8-bit weights (int8: a 16-bit "
                     "scale per group or row); 4-bit symmetric weights store no zero point where int4 counts "
                     "one, and fp8's scales are per tensor or channel at the model's dtype")
    if strategy not in ("channel", "group"):
        raise refuse(cfg, f"{where}.weights.strategy", f"{strategy!r}: expected channel or group")
    size = PER_ROW if strategy == "channel" else _group(cfg, w, "group_size", 128)
    acts = group.get("input_activations")
    compute = "int8" if isinstance(acts, dict) and acts.get("type") == "int" and acts.get("num_bits") == 8 else None
    head = "lm_head" not in [n.rsplit(".", 1)[-1] for n in q.get("ignore") or []]
    _kept(cfg, {"ignore": [n for n in q.get("ignore") or [] if n.rsplit(".", 1)[-1] not in HEADS]}, "ignore", head)
    return Weights("int8", size, compute, head, f"compressed-tensors int8 weights per {strategy}"
                   + (", int8 activations: int8 GEMMs" if compute else ""))


METHODS = {"awq": _awq, "gptq": _gptq, "bitsandbytes": _bitsandbytes, "fbgemm_fp8": _fbgemm_fp8,
           "fp8": _fine_grained_fp8, "compressed-tensors": _compressed}
REFUSED = {"mxfp4": "MXFP4 stores e2m1 values with an e8m0 scale per 32: not a costspec format",
           "hqq": "HQQ's per-group scale and zero layout is not a costspec format",
           "bitnet": "ternary weights are not a costspec format"}


def quantised(text: str, weights: Weights) -> str:
    """The spec text with its precision line set to the weight precision and the LM head kept unquantised."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        match = _PRECISION.match(line)
        if match:
            compute = weights.compute or match.group(1)
            row = " (the group: one scale per output row)" if weights.group == PER_ROW else ""
            lines[i] = (f"precision: {{weights: {weights.weights}, group: {weights.group}, compute: {compute}}}  "
                        f"# {KEY}: {weights.why}{row}")
            break
    else:
        raise RuntimeError("the imported spec has no precision line to quantise")
    if not weights.head:
        dtype = match.group(1)
        native = f", compute: {dtype}" if compute != dtype else ""  # an fp8 / int8 GEMM elsewhere; the head's is not
        for i, line in enumerate(lines):
            if line.startswith("  - lm_head:"):
                lines.insert(i + 1, f"    precision: {{weights: none{native}}}  # the LM head keeps its weight (not "
                             "quantised)")
                break
    return "\n".join(lines)
