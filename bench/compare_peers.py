"""The same model through the FLOP counters users run, next to costspec: FlopCounterMode (meta and
cpu), fvcore, ptflops (both backends) and calflops, on a 1-block ViT-B/16 (B=1, 224 px) built by
costspec's torch builder. Not a timing benchmark: it prints what each tool reports and in which
unit, for docs/comparison.md. Tools that are not installed are skipped (pip install fvcore
ptflops calflops, ideally in a separate virtual environment).

    python bench/compare_peers.py
"""
from __future__ import annotations

import contextlib
import io
import sys
import warnings
from importlib import metadata

from _common import ROOT, SPECS, machine

sys.path.insert(0, str(ROOT))

import costspec  # noqa: E402

SPEC = (SPECS / "vit_b.yaml").read_text(encoding="utf-8").replace("L: {value: 12,", "L: {value: 1,")


def version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""


def quiet(fn):
    """Run fn with its prints and warnings swallowed; return (result, captured text)."""
    out = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        warnings.simplefilter("ignore")
        return fn(), out.getvalue()


def main() -> None:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    model = costspec.loads(SPEC)
    report = model.evaluate("forward")
    cost = model.cost("forward")
    values = model.bind()
    matmul = {k: int(v.xreplace(values)) for k, v in cost.matmul.items()}
    rows = [("costspec eval (TC, bf16)", f"{report.tc:,}", "FLOPs", "GEMM + conv + SDPA matmuls"),
            ("costspec eval (CUDA cores)", f"{report.cuda:,}", "FLOPs", "bias/residual adds, norms, softmax, GELU, scale"),
            ("costspec, matmul classes", ", ".join(f"{k} {v:,}" for k, v in sorted(matmul.items())), "FLOPs", "")]

    def fcm(device):
        torch.manual_seed(0)
        with torch.device(device):
            module, make_input = model.to_torch()
        x = make_input(device)
        with FlopCounterMode(display=False) as counter:
            module(x)
        return counter.get_total_flops(), counter.get_flop_counts()

    for device in ("meta", "cpu"):
        total, counts = fcm(device)
        ops = {str(op): n for op, n in counts.get("Global", {}).items()}
        rows.append((f"FlopCounterMode ({device})", f"{total:,}", "FLOPs",
                     ", ".join(f"{k.split('.')[-1]} {v:,}" for k, v in sorted(ops.items()))))

    torch.manual_seed(0)
    module, make_input = model.to_torch()
    module.eval()
    x = make_input("cpu")
    shape = tuple(x.shape)

    if version("fvcore"):
        from fvcore.nn import FlopCountAnalysis

        def run_fvcore():
            analysis = FlopCountAnalysis(module, (x,))
            analysis.unsupported_ops_warnings(False)
            return analysis.total(), analysis.unsupported_ops()

        (total, unsupported), _ = quiet(run_fvcore)
        rows.append((f"fvcore {version('fvcore')}", f"{total:,}", "MACs ('flops')",
                     "unsupported: " + ", ".join(f"{k} x{v}" for k, v in sorted(unsupported.items()))))
    if version("ptflops"):
        from ptflops import get_model_complexity_info

        for backend in ("pytorch", "aten"):
            def run_ptflops(backend=backend):
                return get_model_complexity_info(module, shape[1:], as_strings=False, print_per_layer_stat=False,
                                                 backend=backend)

            try:
                (macs, params), _ = quiet(run_ptflops)
                rows.append((f"ptflops {version('ptflops')} ({backend})", f"{int(macs):,}", "MACs",
                             f"params {int(params):,}"))
            except Exception as exc:  # noqa: BLE001 - report what the tool does
                rows.append((f"ptflops {version('ptflops')} ({backend})", "error", "", f"{type(exc).__name__}: {exc}"))
    if version("calflops"):
        from calflops import calculate_flops

        def run_calflops():
            return calculate_flops(model=module, input_shape=shape, output_as_string=False, print_results=False,
                                   print_detailed=False)

        try:
            (flops, macs, params), _ = quiet(run_calflops)
            rows.append((f"calflops {version('calflops')}", f"{int(flops):,}", "FLOPs",
                         f"MACs {int(macs):,}, params {int(params):,}"))
        except Exception as exc:  # noqa: BLE001
            rows.append((f"calflops {version('calflops')}", "error", "", f"{type(exc).__name__}: {exc}"))

    print(f"machine: {machine()}")
    print(f"model: ViT-B/16, 1 encoder block, B=1, 224 px (costspec's torch module, forward, eval mode); "
          f"params {report.params:,}")
    width = max(len(r[0]) for r in rows)
    for name, number, unit, note in rows:
        print(f"  {name:<{width}}  {number:>20}  {unit:<14}  {note}")


if __name__ == "__main__":
    main()
