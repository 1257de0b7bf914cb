"""The GPU catalog: peaks per engine and dtype, memory bandwidth (data in data/gpus.yaml)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Mapping

import yaml

from .errors import CostspecError, SpecError, UsageError
from .results import Column, Result, Row, Table

# Elementwise kernels in PyTorch compute half-precision inputs in fp32 ("opmath"), so CUDA-core
# work is priced at the fp32 CUDA-core peak whatever the storage dtype.
POINTWISE_DTYPE = "fp32"
_MATMUL_DTYPE = {"fp32": "fp32", "tf32": "tf32", "fp16": "fp16", "bf16": "bf16", "fp8": "fp8"}


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

    @property
    def bandwidth(self) -> float:
        """Bytes per second."""
        return self.memory_bw_gbps * 1e9

    def tensor_peak(self, dtype: str) -> float:
        """Tensor-Core FLOP/s for matmuls in `dtype`."""
        if dtype not in self.tensor:
            raise UsageError(f"{self.key} has no Tensor-Core {dtype} peak in the catalog "
                             f"(has: {', '.join(self.tensor)})")
        return self.tensor[dtype] * 1e12

    def cuda_peak(self, dtype: str = POINTWISE_DTYPE) -> float:
        """CUDA-core FLOP/s in `dtype`."""
        if dtype not in self.cuda:
            raise UsageError(f"{self.key} has no CUDA-core {dtype} peak in the catalog (has: {', '.join(self.cuda)})")
        return self.cuda[dtype] * 1e12


def _parse(data: dict, file: str) -> dict[str, Gpu]:
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), dict):
        raise SpecError("a GPU catalog needs a `gpus:` mapping", None, "gpus: {key: {name, tensor, cuda, ...}}")
    out = {}
    for key, e in data["gpus"].items():
        try:
            out[key] = Gpu(key, e["name"], e.get("arch", ""), str(e.get("compute_capability", "")),
                           int(e.get("sm_count") or 0), float(e["memory_gb"]), float(e["memory_bw_gbps"]),
                           float(e.get("l2_mb") or 0), e.get("boost_clock_mhz"),
                           {k: float(v) for k, v in (e.get("tensor") or {}).items()},
                           {k: float(v) for k, v in (e.get("cuda") or {}).items()},
                           tuple(e.get("source") or ()))
        except (KeyError, TypeError, ValueError) as exc:
            raise SpecError(f"{file}: GPU '{key}' is incomplete or malformed ({exc})", None,
                            "name, memory_gb, memory_bw_gbps, tensor and cuda peaks") from None
    return out


@lru_cache(maxsize=1)
def _builtin() -> dict[str, Gpu]:
    text = resources.files("costspec.data").joinpath("gpus.yaml").read_text(encoding="utf-8")
    return _parse(yaml.safe_load(text), "gpus.yaml")


def catalog(extra: str | Path | None = None) -> dict[str, Gpu]:
    """The built-in catalog, extended / overridden by a user's catalog file."""
    gpus = dict(_builtin())
    if extra is not None:
        try:
            gpus.update(_parse(yaml.safe_load(Path(extra).read_text(encoding="utf-8")), str(extra)))
        except OSError as exc:
            raise CostspecError(f"cannot read GPU catalog {extra}: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise CostspecError(f"GPU catalog {extra} is not valid YAML: {exc}") from None
    return gpus


def get_gpu(key: str, extra: str | Path | None = None) -> Gpu:
    gpus = catalog(extra)
    if key not in gpus:
        raise UsageError(f"unknown GPU '{key}' (known: {', '.join(sorted(gpus))})")
    return gpus[key]


def matmul_dtype(dtype: str) -> str:
    return _MATMUL_DTYPE[dtype]


def catalog_result(gpus: Mapping[str, Gpu]) -> Result:
    """The catalog as the one result type: a row per GPU, its peaks in TFLOP/s and its memory."""
    columns = [Column("name", "name", "text"), Column("compute_capability", "CC", "text")]
    dtypes = [("tensor", d, f"TC {d}") for d in ("bf16", "fp16", "tf32", "fp8")] + [("cuda", "fp32", "CUDA fp32")]
    columns += [Column(f"{engine}_{d}_tflops", title, "text") for engine, d, title in dtypes]
    columns += [Column("memory_bw_gbps", "HBM GB/s", "text"), Column("memory_gb", "mem GB", "text"),
                Column("source", "source", "text", hidden=True)]
    rows = []
    for key, g in sorted(gpus.items()):
        values: dict = {"name": g.name, "compute_capability": g.compute_capability,
                        "memory_bw_gbps": f"{g.memory_bw_gbps:g}", "memory_gb": f"{g.memory_gb:g}",
                        "source": list(g.source)}
        for engine, d, _ in dtypes:
            peaks = g.tensor if engine == "tensor" else g.cuda
            values[f"{engine}_{d}_tflops"] = f"{peaks[d]:g}" if d in peaks else None
        rows.append(Row(key, key, 0, values))
    return Result("", [Table(columns, rows, label_title="key")], {}, [
        "Peaks in dense TFLOP/s (no 2:4 sparsity); sources in costspec/data/gpus.yaml."],
        {"gpus": {k: {"name": g.name, "tensor_tflops": dict(g.tensor), "cuda_tflops": dict(g.cuda),
                      "memory_bw_gbps": g.memory_bw_gbps, "memory_gb": g.memory_gb} for k, g in sorted(gpus.items())}})
