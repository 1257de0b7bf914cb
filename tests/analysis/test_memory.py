"""`costspec memory`: bytes by kind on real zoo specs against hand arithmetic, the key/value cache against
the formula 2*L*KV*head_dim*tokens*bytes, the fit on a GPU, and bad input."""
from __future__ import annotations

import json
import re

import pytest

from costspec.analysis.gpus import get_gpu
from costspec.analysis.memory import ACTIVATIONS, largest_fitting, memory_kinds, memory_result
from costspec.core.errors import UsageError
from costspec.model import load, loads
from tests.common import ROOT

LLAMA = ROOT / "specs/llama_1b.yaml"
LLAMA_PARAMS = 1_235_814_400  # embedding 262.7 M (the LM head tied to it), 16 blocks of 60.8 M, the final norm


def sizes(model, pass_, **kw) -> dict[str, int]:
    values = model.bind(kw.pop("batch", None))
    result = memory_result(model, memory_kinds(model, pass_, **kw), values, pass_)
    return {row.name: row.exact for row in result.tables[0].rows} | {"total": result.tables[0].total.exact}


def test_llama_params_by_hand():
    c, kv, f, layers, v = 2048, 512, 8192, 16, 128256
    block = 2 * c * c + 2 * c * kv + 3 * c * f + 2 * c  # q, o; k, v; gate, up, down; two RMSNorm weights
    # the tied LM head holds no weight of its own (transformers' count: tests/zoo/test_llama.py)
    assert layers * block + v * c + c == LLAMA_PARAMS == load(LLAMA).evaluate().params


def test_llama_train_adamw():
    got = sizes(load(LLAMA), "train", optimizer="adamw")
    bf16, saved, total = 2 * LLAMA_PARAMS, got.pop(ACTIVATIONS), got.pop("total")
    assert got == {"weights": bf16, "gradients": bf16, "optimizer state (adamw)": 2 * bf16,
                   "optimizer-step buffer": bf16}
    assert total >= max(4 * bf16 + saved, 5 * bf16)  # the moments: tests/analysis/test_memory_peak.py


def test_llama_train_master_weights_and_sgd():
    got = sizes(load(LLAMA), "train", optimizer="adam", master=True)
    assert got["master weights"] == 4 * LLAMA_PARAMS
    assert got["optimizer state (adam)"] == 2 * 4 * LLAMA_PARAMS  # fp32 moments beside fp32 master weights
    assert got["optimizer-step buffer"] == 4 * LLAMA_PARAMS  # one fp32 moment's copy
    assert got["total"] >= (2 + 2 + 4 + 8) * LLAMA_PARAMS + got[ACTIVATIONS]
    assert sizes(load(LLAMA), "train", optimizer="sgd")["optimizer state (sgd)"] == 0


def test_fp32_weights_have_no_master_copy():
    got = sizes(load(LLAMA, dtype="fp32"), "train", master=True)
    assert got["weights"] == 4 * LLAMA_PARAMS and got["master weights"] == 0


def test_llama_decode_kv_cache_is_2_L_KV_d_tokens_bytes():
    model = load(LLAMA, phase="decode", context=2048)
    got = sizes(model, "forward", cache=True, batch=8)
    assert got["kv cache"] == 2 * 16 * 8 * 64 * 2049 * 8 * 2  # k and v, 16 layers, 8 kv heads of 64, bf16
    assert got["total"] == 2 * LLAMA_PARAMS + got["kv cache"]
    prefill = sizes(load(LLAMA, phase="prefill"), "forward", cache=True)
    assert prefill["kv cache"] == 2 * 16 * 8 * 64 * 2048 * 2


def test_fit_and_largest_batch_and_context():
    model = load(LLAMA, phase="decode", context=2048)
    values = model.bind(8)
    kinds = memory_kinds(model, "forward", cache=True)
    result = memory_result(model, kinds, values, "forward", get_gpu("h100-sxm"))
    gpu = result.meta["gpu"]
    per_token = 2 * 16 * 8 * 64 * 2  # bytes of one cached token of one sequence
    capacity = 80 * 10**9
    assert gpu["fits"] and gpu["capacity_bytes"] == capacity
    assert gpu["largest_batch"] == (capacity - 2 * LLAMA_PARAMS) // (per_token * 2049)
    assert gpu["largest_context"] == (capacity - 2 * LLAMA_PARAMS) // (per_token * 8) - 1
    total = sum((k.bytes for k in kinds), 0)
    assert largest_fitting(total, values, model.dims.dims["B"].symbol, 2 * LLAMA_PARAMS) is None


def test_memory_cli(cli):
    out = cli("memory", LLAMA, "--phase", "decode", "--context", "2048", "--gpu", "h100-sxm", "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["kinds"]["kv cache"]["bytes"] == 67_141_632
    assert data["kinds"]["kv cache"]["formula"] == "4*B*C*KV*L*N/heads + 4*B*C*KV*L/heads"
    text = cli("memory", LLAMA, "--pass", "train").stdout
    assert "total (training step peak)" in text and "saved by layer kind" in text
    for args in (["--master-weights"], ["--phase", "decode", "--pass", "train"], ["--optimizer", "lion"],
                 ["--gpu", "no-such-gpu"], ["--set", "C=7"]):
        bad = cli("memory", LLAMA, *args)
        assert bad.returncode == 2 and "Traceback" not in bad.stderr, (args, bad.stderr)


def test_bad_optimizer_in_the_api():
    with pytest.raises(UsageError, match="optimizer"):
        memory_kinds(load(LLAMA), "train", optimizer="lion")


VIT = ROOT / "specs/vit_b.yaml"


@pytest.mark.parametrize("backend", ["flash", "math"])
def test_vit_saved_activations_by_hand(backend):
    """Every tensor a ViT block keeps, from the dims: the norms' input and bf16 statistics; attention's input and,
    flash, the fused qkv output (q, k, v are views of it), the output and the fp32 logsumexp; math, q and k
    scaled, the probabilities and v in fp32 and the output projection's input; the mlp's input, fc1's output
    (GELU's input) and GELU's output (fc2's input)."""
    model = load(VIT, backend=backend)
    values = model.bind(2)
    d = {name: int(values[dim.symbol]) for name, dim in model.dims.dims.items()}
    b, s, c, h, n = d["B"], d["S"], d["C"], d["heads"], d["L"]
    norm = b * s * c * 2 + 2 * b * s * 2
    if backend == "flash":
        attn = b * s * c * 2 + 3 * b * s * c * 2 + b * s * c * 2 + b * h * s * 4
    else:
        attn = b * s * c * 2 + 3 * b * s * c * 4 + b * h * s * s * 4 + b * s * c * 2
    mlp = b * s * c * 2 + 2 * b * s * 4 * c * 2
    expected = b * 3 * d["img"] ** 2 * 2 + n * (2 * norm + attn + mlp) + norm
    assert sizes(model, "train", batch=2)[ACTIVATIONS] == expected


def test_an_unmodelled_layer_is_named_and_the_total_is_a_lower_bound():
    model = loads("costspec: 1\nname: unmodelled\ndims: {B: 1}\ninput: [B, 8, 16]\nlayers:\n"
                  "  - attention: {heads: 2, causal: true, cache: 4}\n  - linear: {out: 4}\n")
    kinds = memory_kinds(model, "train")
    assert ACTIVATIONS not in {k.name for k in kinds} and "gradients" in {k.name for k in kinds}
    result = memory_result(model, kinds, model.bind(1), "train")
    assert re.search("attn.*cache.*not modelled", result.meta["activations_not_counted"])
    assert result.tables[0].total.label == "total (without saved activations)"
    assert any("lower bound" in note for note in result.notes)
