"""Activations saved for backward, the spec's count (`costspec.tree.saved`) against autograd's: every tensor a
saved_tensors_hooks pack hook sees in a training forward of the generated module (FakeTensorMode, deduplicated by
storage, parameters and buffers excluded), per op row, for every zoo spec at small dims with the flash and the
math SDPA kernels. Specs with a layer whose saved tensors are not modelled must say so (a UsageError naming it)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from costspec.core.errors import UsageError  # noqa: E402
from costspec.model import load  # noqa: E402
from costspec.runtime.saved_bytes import compare_saved, measure_saved  # noqa: E402
from tests.common import ROOT, SPECS  # noqa: E402

SMALL = {
    "bert_base": dict(B=2, S=8, C=32, heads=2, L=2, V=50, P=16),
    "clip_vit_l14": dict(B=2, img=28, C=32, heads=2, L=2, E=16),
    "convnext_tiny": dict(B=2, img=64, C1=8, C2=16, C3=16, C4=32, D1=2, D2=2, D3=2, D4=2),
    "efficientnet_b0": dict(B=2, img=64, C0=8, C1=8, C2=8, C3=16, C4=16, C5=16, C6=24, C7=24, H=32, R2=2, R3=2,
                            R4=2, R5=2, R6=2),
    "gpt2_small": dict(B=2, S=8, C=32, heads=2, L=2, V=50, P=16),
    "llama_1b": dict(B=2, S=8, C=32, heads=4, KV=2, F=64, L=2, V=50),
    "llama3_8b": dict(B=2, S=8, C=32, heads=4, KV=2, F=64, L=2, V=50),
    "mistral_7b": dict(B=2, S=8, C=32, heads=4, KV=2, F=64, L=2, V=50, W=4),
    "mobilenet_v2": dict(B=2, img=32),
    "pythia_160m": dict(B=2, S=8, C=32, heads=2, F=64, L=2, V=50),
    "resnet50": dict(B=2, img=64, E=8, W1=8, W2=8, W3=16, W4=16, D1=2, D2=2, D3=2, D4=2),
    "toy_mlp": dict(M=8, D=16, N=2),
    "vit_b": dict(B=2, img=32, C=32, heads=2, L=2),
    "vit_h": dict(B=2, img=28, C=32, heads=2, L=2),
    "vit_l": dict(B=2, img=32, C=32, heads=2, L=2),
    "whisper_tiny_encoder": dict(B=2, M=8, S=8, C=32, heads=2, F=64, L=2),
    # batch 1: the heads' linears read a slice of the last hidden state (a copy in torch at B > 1)
    "yolos_small": dict(B=1, C=32, heads=2, F=64, L=3, det=5, labels=7, gh=4, gw=6, img_h=64, img_w=96),
}
UNMODELLED = {  # spec -> the layer option whose saved tensors are not modelled yet
    "deepencoder": "rel_pos", "deepseek_v3": "mla", "gemma2_2b": "softcap", "mamba_130m": "mamba", "mixtral_8x7b": "moe",
    "sam_vit_b": "rel_pos", "siglip_b16": "queries", "swin_tiny": "window", "t5_small_encoder": "rel_bias",
}


def test_every_zoo_spec_is_compared_or_named():
    assert {p.stem for p in SPECS} == set(SMALL) | set(UNMODELLED)


@pytest.mark.parametrize("spec", sorted(SMALL))
def test_saved_bytes_equal_autograd(spec):
    for backend in ("flash", "math"):
        model = load(ROOT / "specs" / f"{spec}.yaml", backend=backend)
        comparison = compare_saved(model, model.bind(sets=SMALL[spec]))
        assert comparison.rows and sum(m for _, _, m in comparison.rows) > 0
        assert not comparison.failures(), (backend, comparison.failures())


@pytest.mark.parametrize("spec", sorted(UNMODELLED))
def test_unmodelled_layers_are_named(spec):
    with pytest.raises(UsageError, match=f"layer '.*'.*{UNMODELLED[spec]}.*not modelled"):
        model = load(ROOT / "specs" / f"{spec}.yaml", backend="flash")
        compare_saved(model, model.bind())


def test_a_view_saved_twice_is_one_tensor():
    """relu keeps its output, the linear after it its input: one tensor, charged to relu; a flatten between them
    (a view) changes nothing."""
    text = """costspec: 1
name: views
precision: {dtype: fp32}
input: [2, 3, 4]
layers:
  - linear: {out: 4}
  - activation: {fn: relu}
  - flatten: {start: 1}
  - linear: {out: 5}
"""
    from costspec.model import loads
    from costspec.tree.saved import saved_bytes

    model = loads(text)
    # linear1 keeps the model input, act its output, linear2 (through the flatten) nothing new
    assert saved_bytes(model.root) == {"linear1": 2 * 3 * 4 * 4, "act": 2 * 3 * 4 * 4}
    measured = measure_saved(model, model.bind())
    assert measured.by_layer == {"linear1": 96, "act": 96} and len(measured.tensors) == 2
