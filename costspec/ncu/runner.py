"""``python -m costspec.ncu.runner SPEC ...``: the program `costspec ncu run` profiles under ncu.

It builds the spec's torch module on the GPU (`costspec.runtime.torch_build`), wraps every layer in NVTX
ranges (`costspec.ncu.nvtx`: forward and backward, process-scope push/pop), runs ``--warmup``
steps, then runs ONE step between ``cudaProfilerStart`` / ``cudaProfilerStop``
(``torch.cuda.profiler.start/stop``). ncu is started with ``--profile-from-start off``, so only that
step's kernels are profiled: lazy CUDA init, cuBLAS handle and workspace creation and autotuning
all happen in the warm-up, outside the profiled region. (An ``--nvtx-include`` filter would also
work, but the profiler API does not depend on how ncu matches range names across threads.)

With ``--sidecar FILE`` it writes the run's facts as JSON: GPU name, compute capability, torch and
CUDA versions, spec, dims, pass, dtype, warm-up steps; `costspec ncu run` adds the ncu version and
the command line.
"""
from __future__ import annotations

import argparse
import json
import sys

from costspec.runtime.torch_build import TORCH_DTYPES, configure_dtype


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m costspec.ncu.runner",
                                description="Run one profiled step of a costspec spec's torch module on CUDA.")
    p.add_argument("spec")
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--pass", dest="pass_", choices=("forward", "train"), default="forward")
    p.add_argument("--dtype", choices=tuple(TORCH_DTYPES), default=None)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--sidecar", default=None)
    p.add_argument("--backend", choices=("flash", "math", "eager"), default=None)
    p.add_argument("--phase", choices=("prefill", "decode"), default=None)
    p.add_argument("--context", type=int, default=None)
    return p.parse_args(argv)


def parse_sets(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        name, _, value = item.partition("=")
        out[name.strip()] = int(value)
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from costspec.core.dims import CLI_WORDS
    from costspec.core.errors import CostspecError
    from costspec.core.safeio import write_text
    from costspec.ncu.nvtx import NvtxRanges, TorchNvtx
    from costspec.runtime.layer_hooks import LayerHooks, layer_paths, step
    from costspec.runtime.torch_build import build_module, import_torch
    from costspec.tree.network import Network

    try:
        torch = import_torch("costspec.ncu.runner")
        if not torch.cuda.is_available():
            print("costspec.ncu.runner: error: no CUDA GPU is available", file=sys.stderr)
            return 2
        model = Network.from_file(args.spec)
        if args.backend is not None:  # every attention layer's kernel family (`costspec ncu run --backend`)
            from costspec.analysis.serving import backend_doc

            model = Network(backend_doc(model.doc, args.backend, CLI_WORDS))
        if args.phase is not None or args.context is not None:  # `costspec ncu run --phase/--context`
            from costspec.analysis.serving import serving_doc

            model = Network(serving_doc(model, args.phase or "prefill", args.context, CLI_WORDS))
        values = model.bind(args.batch, parse_sets(args.sets), CLI_WORDS)
        dtype_name = args.dtype or str(model.precision)
        dtype = configure_dtype(torch, dtype_name)
    except (CostspecError, ValueError) as exc:
        print(f"costspec.ncu.runner: error: {exc}", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    with torch.device("cuda"):
        module, make_input = build_module(model, values)
    module = module.to(dtype=dtype)
    x = make_input("cuda", dtype)
    train = args.pass_ == "train"
    ranges = NvtxRanges(layer_paths(model, module), TorchNvtx())
    with LayerHooks(model, module, ranges, ranges.names):
        for _ in range(args.warmup):
            step(module, x, train, ranges.region)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        step(module, x, train, ranges.region)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    ranges.close()
    if args.sidecar:
        major, minor = torch.cuda.get_device_capability()
        facts = {
            "gpu": torch.cuda.get_device_name(),
            "compute_capability": f"{major}.{minor}",
            "torch_version": torch.__version__,
            "cuda_version": torch.version.cuda,
            "spec": args.spec,
            "spec_name": model.name,
            "pass": args.pass_,
            "dtype": dtype_name,
            "warmup": args.warmup,
            "backend": args.backend,
            "phase": args.phase,
            "context": args.context,
            "bind": {**parse_sets(args.sets), **({"B": args.batch} if args.batch is not None else {})},
            "dims": {str(k): int(v) for k, v in values.items()},
            "runner_argv": sys.argv,
        }
        write_text(args.sidecar, json.dumps({"costspec_ncu_sidecar": 1, **facts}, indent=2) + "\n", [args.spec])
    return 0


if __name__ == "__main__":
    sys.exit(main())
