"""In-process re-evaluation at a new batch size: `Model.evaluate` on a loaded costspec model vs
re-running torch's FlopCounterMode over the transformers model, already built on the meta device, at
that batch size. The same run, the same machine, for llama_1b (LlamaForCausalLM: Llama-3.2-1B, its tied
LM head included) and mixtral_8x7b (MixtralModel, experts as `batched_mm`, the one implementation
FlopCounterMode counts on meta).

costspec: the model is loaded and evaluated once (that compiles it), then evaluated at --evals new
batch sizes (every one unseen), timed one by one, CPU time; the median is reported as time per
re-evaluation and points per second. FlopCounterMode: the module is built once (its build time is
shown apart), then counted at --fcm-runs new batch sizes; median CPU time per count. Both give the
whole forward's matmul FLOPs: printed side by side.

    python bench/bench_reeval.py [--evals 2000] [--fcm-runs 3] [--only llama_1b]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

from _common import ROOT, SPECS, fmt_s, machine

sys.path.insert(0, str(ROOT))

import costspec  # noqa: E402

# the zoo spec's defaults as transformers configs (llama_1b with its tied LM head, mixtral_8x7b without one)
MODELS = {
    "llama_1b": ("LlamaForCausalLM", "LlamaConfig", {"hidden_size": 2048, "intermediate_size": 8192,
                                                     "num_hidden_layers": 16, "num_attention_heads": 32,
                                                     "num_key_value_heads": 8, "vocab_size": 128256,
                                                     "tie_word_embeddings": True}),
    "mixtral_8x7b": ("MixtralModel", "MixtralConfig", {"hidden_size": 4096, "intermediate_size": 14336,
                                                       "num_hidden_layers": 32, "num_attention_heads": 32,
                                                       "num_key_value_heads": 8, "vocab_size": 32000,
                                                       "num_local_experts": 8, "num_experts_per_tok": 2,
                                                       "_experts_implementation": "batched_mm"}),
}


def costspec_side(name: str, evals: int) -> tuple[float, int, int]:
    """(median CPU seconds per re-evaluation, tc FLOPs at batch 2, its sequence length)."""
    model = costspec.load(SPECS / f"{name}.yaml")
    model.evaluate("forward", B=1)  # the first evaluation compiles the model
    times = []
    for batch in range(3, 3 + evals):  # every batch size new
        start = time.process_time()
        model.evaluate("forward", B=batch)
        times.append(time.process_time() - start)
    return statistics.median(times), model.evaluate("forward", B=2).tc, int(model.dims.dims["S"].default)


def flopcounter_side(name: str, seq: int, runs: int) -> tuple[float, float, int]:
    """(CPU seconds to build the module on meta, median CPU seconds per count at a new batch, FLOPs at batch 2)."""
    import torch
    import transformers
    from torch.utils.flop_counter import FlopCounterMode

    model_cls, config_cls, config = MODELS[name]
    start = time.process_time()
    with torch.device("meta"):
        module = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**config))
    module.eval()
    build = time.process_time() - start

    def count(batch: int) -> int:
        with FlopCounterMode(display=False) as counter:
            module(torch.zeros(batch, seq, dtype=torch.long, device="meta"))
        return counter.get_total_flops()

    flops = count(2)
    times = []
    for batch in range(3, 3 + runs):
        start = time.process_time()
        count(batch)
        times.append(time.process_time() - start)
    return build, statistics.median(times), flops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evals", type=int, default=2000)
    parser.add_argument("--fcm-runs", type=int, default=3)
    parser.add_argument("--only", choices=sorted(MODELS))
    args = parser.parse_args()

    print(f"machine: {machine()}")
    for name in [args.only] if args.only else list(MODELS):
        per_eval, tc, seq = costspec_side(name, args.evals)
        build, per_count, flops = flopcounter_side(name, seq, args.fcm_runs)
        print(f"{name} forward, S={seq}, a new batch size each time (CPU time, median):")
        print(f"  costspec Model.evaluate           {fmt_s(per_eval):>9}  = {1 / per_eval:,.0f} evaluations/s "
              f"(median of {args.evals})")
        print(f"  FlopCounterMode, {MODELS[name][0]} on meta {fmt_s(per_count):>9}  (median of {args.fcm_runs}; "
              f"building the module once: {fmt_s(build)})")
        print(f"  matmul FLOPs at B=2: costspec TC {tc:,} | FlopCounterMode {flops:,} | "
              f"{'equal' if tc == flops else f'differ by {flops - tc:+,}'}")
        print(f"  ratio: re-evaluation is {per_count / per_eval:,.0f}x faster (target >= 1,000x)")


if __name__ == "__main__":
    main()
