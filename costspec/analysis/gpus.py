"""The GPU catalog: peaks per engine and dtype, memory bandwidth (data in data/gpus.yaml)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Mapping

from costspec.core.conventions import PEAK_KEY
from costspec.core.errors import UsageError
from costspec.core.results import Column, Result, Row, Table
from costspec.core.safeio import CATALOG, finite_number, location_error, read_yaml
from costspec.core.yaml_marks import MarkedDoc, load_marked

# Elementwise kernels in PyTorch compute half-precision inputs in fp32 ("opmath"), so CUDA-core
# work is priced at the fp32 CUDA-core peak whatever the storage dtype.
POINTWISE_DTYPE = "fp32"


@dataclass(frozen=True)
class Gpu:
    key: str
    name: str
    arch: str
    compute_capability: str
    sm_count: int
    memory_gb: float
    memory_bw_gbps: float
    l2_mb: float
    boost_clock_mhz: float | None
    tensor: Mapping[str, float]  # TFLOP/s
    cuda: Mapping[str, float]  # TFLOP/s
    source: tuple[str, ...]
    tensor_sparse: Mapping[str, float] = field(default_factory=dict)  # TFLOP/s with 2:4 sparsity (datasheet)

    @property
    def bandwidth(self) -> float:
        """Bytes per second."""
        return self.memory_bw_gbps * 1e9

    def tensor_peak(self, dtype: str) -> float:
        """Tensor-Core FLOP/s (OP/s for int8) for matmuls in `dtype` (fp8_e4m3 / fp8_e5m2 at the fp8
        peak, nvfp4 / mxfp4 at the fp4 peak)."""
        key = matmul_dtype(dtype)
        if key not in self.tensor:
            raise UsageError(f"{self.key} has no Tensor-Core {key} peak in the catalog "
                             f"(has: {', '.join(self.tensor)})")
        return self.tensor[key] * 1e12

    def sparse_tensor_peak(self, dtype: str) -> float:
        """Sparse Tensor-Core FLOP/s for 2:4 GEMMs in `dtype`, as the datasheet prints it: dense-equivalent
        FLOP/s, i.e. the rate at which a 2:4 GEMM's dense FLOPs complete (cuSPARSELt's convention)."""
        key = matmul_dtype(dtype)
        if key not in self.tensor_sparse:
            has = ", ".join(self.tensor_sparse) or "none"
            raise UsageError(f"{self.key} has no sparse (2:4) Tensor-Core {key} peak in the catalog (has: {has}); "
                             "a 2:4 layer needs one (a catalog entry's tensor_sparse)")
        return self.tensor_sparse[key] * 1e12

    def supports(self, dtype: str) -> bool:
        """True when the catalog gives this GPU a Tensor-Core peak for `dtype` (fp32 always runs)."""
        return dtype == "fp32" or matmul_dtype(dtype) in self.tensor

    def cuda_peak(self, dtype: str = POINTWISE_DTYPE) -> float:
        """CUDA-core FLOP/s in `dtype`."""
        if dtype not in self.cuda:
            raise UsageError(f"{self.key} has no CUDA-core {dtype} peak in the catalog (has: {', '.join(self.cuda)})")
        return self.cuda[dtype] * 1e12


_FIELDS = ("name", "arch", "compute_capability", "sm_count", "boost_clock_mhz", "memory_gb", "memory_bw_gbps",
           "l2_mb", "tensor", "tensor_sparse", "cuda", "source")
_EXPECTED_ENTRY = "name, memory_gb, memory_bw_gbps, tensor and cuda peaks (TFLOP/s per dtype)"


def _parse(doc: MarkedDoc) -> dict[str, Gpu]:
    """Schema-check a catalog (every peak and bandwidth a positive finite number, names strings)
    and build its GPUs; a bad value is a SpecError at its file:line and YAML path."""
    data = doc.data
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), dict):
        raise location_error(doc, ("gpus",) if isinstance(data, dict) else (), "a GPU catalog needs a `gpus:` mapping",
                             "gpus: {key: {name, memory_gb, memory_bw_gbps, tensor, cuda, ...}}")
    unknown = sorted(set(data) - {"version", "gpus"})
    if unknown:
        raise location_error(doc, (unknown[0],), f"unknown key '{unknown[0]}' in a GPU catalog", "version, gpus")
    return {key: _entry(doc, key, entry) for key, entry in data["gpus"].items()}


def _entry(doc: MarkedDoc, key: str, e: object) -> Gpu:
    at = ("gpus", key)
    if not isinstance(e, dict):
        raise location_error(doc, at, f"GPU '{key}' is not a mapping", _EXPECTED_ENTRY)
    for field_name in e:
        if field_name not in _FIELDS:
            raise location_error(doc, at + (field_name,), f"unknown key '{field_name}' for GPU '{key}'",
                                 "one of: " + ", ".join(_FIELDS))
    for required in ("name", "memory_gb", "memory_bw_gbps"):
        if required not in e:
            raise location_error(doc, at, f"GPU '{key}' has no '{required}'", _EXPECTED_ENTRY)

    def text(name: str, default: str = "") -> str:
        value = e.get(name, default)
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise location_error(doc, at + (name,), f"{name} of GPU '{key}' is {_kind(value)}", "a string")
        return str(value)

    def positive(value: object, where: tuple, what: str, zero_ok: bool = False) -> float:
        if not finite_number(value) or value < 0 or (value == 0 and not zero_ok):
            raise location_error(doc, where, f"{what} of GPU '{key}' is {value!r}",
                                 "a finite number" + (" >= 0" if zero_ok else " > 0"))
        return float(value)

    def peaks(name: str) -> dict[str, float]:
        table = e.get(name) or {}
        if not isinstance(table, dict):
            raise location_error(doc, at + (name,), f"{name} peaks of GPU '{key}' are {_kind(table)}",
                                 "a mapping dtype: TFLOP/s, e.g. {bf16: 989.4}")
        return {dtype: positive(v, at + (name, dtype), f"{name} {dtype} peak") for dtype, v in table.items()}

    sm_count = e.get("sm_count") or 0
    if isinstance(sm_count, bool) or not isinstance(sm_count, int) or sm_count < 0:
        raise location_error(doc, at + ("sm_count",), f"sm_count of GPU '{key}' is {sm_count!r}", "an integer >= 0")
    clock = e.get("boost_clock_mhz")
    source = e.get("source") or ()
    source = (source,) if isinstance(source, str) else source
    if not isinstance(source, (list, tuple)) or not all(isinstance(s, str) for s in source):
        raise location_error(doc, at + ("source",), f"source of GPU '{key}' is {_kind(source)}",
                             "a list of strings (URLs, notes)")
    return Gpu(key, text("name"), text("arch"), text("compute_capability"), sm_count,
               positive(e["memory_gb"], at + ("memory_gb",), "memory_gb"),
               positive(e["memory_bw_gbps"], at + ("memory_bw_gbps",), "memory_bw_gbps"),
               positive(e.get("l2_mb") or 0, at + ("l2_mb",), "l2_mb", zero_ok=True),
               None if clock is None else positive(clock, at + ("boost_clock_mhz",), "boost_clock_mhz"),
               peaks("tensor"), peaks("cuda"), tuple(source), peaks("tensor_sparse"))


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a mapping"}.get(type(value), type(value).__name__)


@lru_cache(maxsize=1)
def _builtin() -> dict[str, Gpu]:
    text = resources.files("costspec.data").joinpath("gpus.yaml").read_text(encoding="utf-8")
    return _parse(load_marked(text, "gpus.yaml (built-in)", kind=CATALOG.name))


def catalog(extra: str | Path | None = None) -> dict[str, Gpu]:
    """The built-in catalog, extended / overridden by a user's catalog file (read with the
    bounds of `costspec.core.safeio`: a regular file, at most 1 MB, plain YAML)."""
    gpus = dict(_builtin())
    if extra is not None:
        gpus.update(_parse(read_yaml(extra, CATALOG)))
    return gpus


def get_gpu(key: str, extra: str | Path | None = None) -> Gpu:
    gpus = catalog(extra)
    if key not in gpus:
        raise UsageError(f"unknown GPU '{key}' (known: {', '.join(sorted(gpus))})")
    return gpus[key]


def matmul_dtype(dtype: str) -> str:
    """The catalog key of `dtype`'s Tensor-Core peak."""
    return PEAK_KEY.get(dtype, dtype)


def catalog_result(gpus: Mapping[str, Gpu]) -> Result:
    """The catalog as the one result type: a row per GPU, its peaks in TFLOP/s and its memory."""
    columns = [Column("gpu_name", "name", "text"), Column("compute_capability", "CC", "text")]
    dtypes = [("tensor", d, f"TC {d}") for d in ("bf16", "fp16", "tf32", "fp8")]
    dtypes += [("tensor_sparse", "bf16", "TC bf16 2:4"), ("cuda", "fp32", "CUDA fp32")]
    columns += [Column(f"{engine}_{d}_tflops", title, "text") for engine, d, title in dtypes]
    columns += [Column("memory_bw_gbps", "HBM GB/s", "text"), Column("memory_gb", "mem GB", "text"),
                Column("source", "source", "text", hidden=True)]
    rows = []
    for key, g in sorted(gpus.items()):
        values: dict = {"gpu_name": g.name, "compute_capability": g.compute_capability,
                        "memory_bw_gbps": f"{g.memory_bw_gbps:g}", "memory_gb": f"{g.memory_gb:g}",
                        "source": list(g.source)}
        for engine, d, _ in dtypes:
            peaks = {"tensor": g.tensor, "tensor_sparse": g.tensor_sparse, "cuda": g.cuda}[engine]
            values[f"{engine}_{d}_tflops"] = f"{peaks[d]:g}" if d in peaks else None
        rows.append(Row(key, key, 0, values))
    return Result("", [Table(columns, rows, label_title="key")], {}, [
        "Peaks in dense TFLOP/s, except 'TC bf16 2:4': the datasheet's 2:4 sparse peak (dense-equivalent "
        "FLOP/s), which 2:4 layers run at; sources in costspec/data/gpus.yaml."],
        {"gpus": {k: {"name": g.name, "tensor_tflops": dict(g.tensor), "tensor_sparse_tflops": dict(g.tensor_sparse),
                      "cuda_tflops": dict(g.cuda),
                      "memory_bw_gbps": g.memory_bw_gbps, "memory_gb": g.memory_gb} for k, g in sorted(gpus.items())}})
