"""The generated module serves a decode step: one new token per sequence after N cached ones.

`--phase decode --context N` on validate, time and ncu run builds attention with a key/value cache of
N tokens (buffers of random values): the projections, norms and RoPE run on the new token, the SDPA
attends to N + 1 keys. validate proves the decode costs equal FlopCounterMode and the aten ops on that
module (self-consistency; decode against transformers with a real cache is tests/analysis/test_serving.py).
"""
from __future__ import annotations

import json

import pytest

from costspec.model import load
from costspec.runtime.torch_build import build_module
from tests.common import invoke

SMALL_GEMMA = ["--set", "L=26", "--set", "C=64", "--set", "heads=2", "--set", "KV=1", "--set", "F=96",
               "--set", "V=100"]


@pytest.mark.parametrize(("spec", "args"), [
    ("specs/llama_1b.yaml", ["--set", "L=2", "--set", "C=64", "--set", "heads=4", "--set", "KV=2", "--set", "F=96",
                             "--set", "V=100", "--context", "64", "--batch", "2"]),
    ("specs/gpt2_small.yaml", ["--set", "L=2", "--context", "37", "--batch", "3"]),
    ("specs/mixtral_8x7b.yaml", ["--set", "L=1", "--set", "C=64", "--set", "heads=4", "--set", "KV=2",
                                 "--set", "F=96", "--set", "V=100", "--context", "20"]),
    # sliding-window layers (window 16 < 40 cached: the cache holds 15) and soft-capped eager scores
    ("specs/gemma2_2b.yaml", [*SMALL_GEMMA, "--set", "W=16", "--context", "40"]),
])
def test_decode_step_counts_equal_the_generated_module(spec, args):
    result = invoke("validate", spec, "--phase", "decode", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "result: PASS" in result.stdout


def test_the_cache_holds_context_keys_of_random_values():
    model = load("specs/llama_1b.yaml", phase="decode", context=48)
    # narrow widths: a full-width table would grow this process (and the peak RSS its later subprocesses
    # inherit at fork)
    values = model.bind(2, {"L": 1, "C": 64, "heads": 4, "KV": 2, "F": 96, "V": 100})
    module, make_input = build_module(model, values)
    attn = next(m for m in module.modules() if hasattr(m, "k_cache"))
    assert tuple(attn.k_cache.shape) == (2, 2, 48, 16) and tuple(attn.v_cache.shape) == (2, 2, 48, 16)
    assert attn.k_cache.abs().sum() > 0  # never zeros
    assert tuple(make_input("cpu").shape) == (2, 1)  # one new token per sequence
    assert module(make_input("cpu")).shape[:2] == (2, 1)


def test_a_sliding_window_caches_window_minus_one_tokens():
    model = load("specs/mistral_7b.yaml", phase="decode", context=100)
    values = model.bind(1, {"L": 1, "C": 64, "heads": 4, "KV": 2, "F": 96, "V": 100, "W": 16})
    module, _ = build_module(model, values)
    attn = next(m for m in module.modules() if hasattr(m, "k_cache"))
    assert attn.k_cache.shape[2] == 15


def test_a_prefill_after_cached_tokens_is_costed_but_not_built():
    result = invoke("validate", "specs/llama_1b.yaml", "--phase", "prefill", "--context", "8", "--set", "L=1",
                    "--set", "S=4")
    assert result.returncode == 2
    assert "one new token per sequence" in result.stderr and "Traceback" not in result.stderr


def test_mla_decode_appends_to_the_cached_latent_and_rope_key():
    # transformers' form: kv_b up-projects every cached latent again each step (costspec's MLA decode cost)
    small = dict(C=16, heads=2, RQ=6, R=10, DN=4, DR=2, DV=3, F=24, E=4, K=2, FE=8, SH=1, G=2, TG=1, Ld=1, Lm=1, V=50)
    sets = [a for k, v in small.items() for a in ("--set", f"{k}={v}")]
    result = invoke("validate", "specs/deepseek_v3.yaml", "--phase", "decode", "--context", "8", "--batch", "2", *sets)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "result: PASS" in result.stdout


def test_decode_needs_the_forward_pass():
    result = invoke("validate", "specs/llama_1b.yaml", "--phase", "decode", "--pass", "train", "--set", "L=1")
    assert result.returncode == 2 and "runs forward only" in result.stderr


def test_ncu_run_profiles_a_decode_step():
    result = invoke("ncu", "run", "specs/llama_1b.yaml", "--set", "L=2", "--phase", "decode", "--context", "2048",
                    "-o", "llama.decode.csv", "--print-command", "--arch", "9.0", "--format", "json")
    assert result.returncode == 0, result.stderr
    command = " ".join(json.loads(result.stdout)["command"])
    assert "costspec.ncu.runner specs/llama_1b.yaml --phase decode --context 2048 --set L=2" in command
