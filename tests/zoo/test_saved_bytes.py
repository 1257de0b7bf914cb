"""Activations saved for backward over the zoo: the spec's count (`costspec.tree.saved`) against autograd's,
every tensor a saved_tensors_hooks pack hook sees in a training forward of the generated module (FakeTensorMode,
deduplicated by storage, parameters and buffers excluded), per op row, for every zoo spec at small dims with
each SDPA kernel family it can run (flash and math; eager where soft-capping rules math out). Every zoo spec is
compared."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from costspec.model import load  # noqa: E402
from costspec.runtime.saved_bytes import compare_saved  # noqa: E402
from tests.common import ROOT, SPECS  # noqa: E402

SAM = dict(B=2, img=80, C=32, heads=2, L=12, win=3, N=8)  # 5 x 5 tokens: 3 x 3 windows pad the grid to 6 x 6
SMALL = {
    "bert_base": dict(B=2, S=8, C=32, heads=2, L=2, V=50, P=16),
    "clip_vit_l14": dict(B=2, img=28, C=32, heads=2, L=2, E=16),
    "convnext_tiny": dict(B=2, img=64, C1=8, C2=16, C3=16, C4=32, D1=2, D2=2, D3=2, D4=2),
    "deepencoder": dict(SAM, D=32, Dh=2, Lc=2),
    "deepseek_v3": dict(B=2, S=8, C=16, heads=2, RQ=6, R=10, DN=4, DR=2, DV=3, F=24, E=4, K=2, FE=8, SH=1, G=2, TG=1,
                        Ld=1, Lm=1, V=50),
    "efficientnet_b0": dict(B=2, img=64, C0=8, C1=8, C2=8, C3=16, C4=16, C5=16, C6=24, C7=24, H=32, R2=2, R3=2,
                            R4=2, R5=2, R6=2),
    "gemma2_2b": dict(B=2, S=8, C=32, heads=4, KV=2, D=8, F=64, L=26, V=50, W=4),  # (26: the global layers' indices)
    "gpt2_small": dict(B=2, S=8, C=32, heads=2, L=2, V=50, P=16),
    "llama_1b": dict(B=2, S=8, C=32, heads=4, KV=2, F=64, L=2, V=50),
    "llama3_8b": dict(B=2, S=8, C=32, heads=4, KV=2, F=64, L=2, V=50),
    "mamba_130m": dict(B=2, S=6, C=16, N=4, R=2, L=2, V=50),
    "mistral_7b": dict(B=2, S=8, C=32, heads=4, KV=2, F=64, L=2, V=50, W=4),
    "mixtral_8x7b": dict(B=2, S=8, C=16, heads=4, KV=2, F=24, L=2, V=50, E=4, K=2),
    "mobilenet_v2": dict(B=2, img=32),
    "pythia_160m": dict(B=2, S=8, C=32, heads=2, F=64, L=2, V=50),
    "resnet50": dict(B=2, img=64, E=8, W1=8, W2=8, W3=16, W4=16, D1=2, D2=2, D3=2, D4=2),
    "sam_vit_b": SAM,
    "siglip_b16": dict(B=2, img=32, C=32, heads=2, L=2, F=64),
    "swin_tiny": dict(B=2, img=64, win=2, C=8, H1=1, H2=2, H3=2, H4=2),  # grids 16, 8, 4, 2: the last one window
    "t5_small_encoder": dict(B=2, S=8, C=32, heads=2, D=8, F=64, L=2, V=50),
    "toy_mlp": dict(M=8, D=16, N=2),
    "vit_b": dict(B=2, img=32, C=32, heads=2, L=2),
    "vit_h": dict(B=2, img=28, C=32, heads=2, L=2),
    "vit_l": dict(B=2, img=32, C=32, heads=2, L=2),
    "whisper_tiny_encoder": dict(B=2, M=8, S=8, C=32, heads=2, F=64, L=2),
    # batch 1: the heads' linears read a slice of the last hidden state (a copy in torch at B > 1)
    "yolos_small": dict(B=1, C=32, heads=2, F=64, L=3, det=5, labels=7, gh=4, gw=6, img_h=64, img_w=96),
}
BACKENDS = {"gemma2_2b": ("flash", "eager")}  # soft-capping: PyTorch's SDPA (math) has none
SLOW = {"deepencoder", "swin_tiny", "gemma2_2b"}  # 12-26 layers (sam_vit_b is their fast variant, with tests/ops)
DTYPES: dict[str, str] = {}  # every zoo spec at its own dtype (mamba's scan included: bf16 with fp32 states)


def test_every_zoo_spec_is_compared():
    assert {p.stem for p in SPECS} == set(SMALL)


@pytest.mark.parametrize("spec", [pytest.param(s, marks=[pytest.mark.slow] if s in SLOW else []) for s in sorted(SMALL)])
def test_saved_bytes_equal_autograd(spec):
    for backend in BACKENDS.get(spec, ("flash", "math")):
        model = load(ROOT / "specs" / f"{spec}.yaml", dtype=DTYPES.get(spec), backend=backend)
        comparison = compare_saved(model, model.bind(sets=SMALL[spec]))
        assert comparison.rows and sum(m for _, _, m in comparison.rows) > 0
        assert not comparison.failures(), (backend, comparison.failures())
