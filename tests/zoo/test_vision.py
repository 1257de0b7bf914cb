"""The vision zoo specs convnext_tiny, swin_tiny and siglip_b16: their totals against hand arithmetic
from the papers' configurations, and `validate --against` their transformers classes (forward and
train, exact matmul FLOPs and parameters; slow: each run builds and counts the real model)."""
from __future__ import annotations

import pytest

from costspec.model import load
from tests.common import ROOT


# ----------------------------------------------------------------------------------------------
# Hand arithmetic (batch 1, 224 px; 2 FLOPs per multiply-add)
# ----------------------------------------------------------------------------------------------
def convnext_tiny_numbers() -> tuple[int, int]:
    """(forward matmul FLOPs, params) of ConvNeXt-T: widths 96..768, depths 3, 3, 9, 3, 4x4 stem."""
    widths, depths = (96, 192, 384, 768), (3, 3, 9, 3)
    grids = (56, 28, 14, 7)
    flops = 2 * 56 * 56 * 96 * (3 * 4 * 4)  # stem conv
    params = 3 * 16 * 96 + 96 + 2 * 96  # stem conv + its LayerNorm
    for i, (c, d, g) in enumerate(zip(widths, depths, grids)):
        n = g * g
        if i:  # LayerNorm over the previous width, 2x2 stride-2 conv
            cin = widths[i - 1]
            flops += 2 * n * c * cin * 4
            params += 2 * cin + 4 * cin * c + c
        # block: depthwise 7x7 (49 MACs per output), fc1 C -> 4C, fc2 4C -> C
        flops += d * (2 * n * c * 49 + 2 * 2 * n * c * 4 * c)
        # dwconv 49C + C, LN 2C, fc1 4C^2 + 4C, fc2 4C^2 + C, gamma C
        params += d * (8 * c * c + 58 * c)
    params += 2 * 768  # final LayerNorm
    return flops, params


def swin_tiny_numbers() -> tuple[int, int]:
    """(forward matmul FLOPs, params) of Swin-T: C = 96, depths 2, 2, 6, 2, heads 3, 6, 12, 24, window 7."""
    depths, heads, t = (2, 2, 6, 2), (3, 6, 12, 24), 7 * 7
    flops = 2 * 56 * 56 * 96 * (3 * 4 * 4)  # patch embedding conv
    params = 3 * 16 * 96 + 96 + 2 * 96  # conv + LayerNorm
    for i, (d, h) in enumerate(zip(depths, heads)):
        c, n = 96 * 2**i, (56 // 2**i) ** 2
        # q, k, v, o: 4 GEMMs N x C x C; QK^T and AV over each window's 49 x 49 pairs (h * d = C); MLP x4
        flops += d * (4 * 2 * n * c * c + 2 * 2 * n * t * c + 2 * 2 * n * c * 4 * c)
        # 2 LayerNorms, q/k/v/o with biases, a (2*7-1)^2 x heads bias table, MLP C -> 4C -> C
        params += d * (4 * c + 4 * (c * c + c) + 13 * 13 * h + 8 * c * c + 5 * c)
        if i < 3:  # patch merging: LayerNorm(4C), Linear 4C -> 2C without bias on N/4 tokens
            flops += 2 * (n // 4) * 4 * c * 2 * c
            params += 8 * c + 8 * c * c
    params += 2 * 768  # final LayerNorm
    return flops, params


def siglip_b16_numbers() -> tuple[int, int]:
    """(forward matmul FLOPs, params) of SigLIP B/16's vision tower with its attention-pooling head."""
    c, f, layers, n = 768, 3072, 12, 196
    flops = 2 * n * c * (3 * 16 * 16)  # patch embedding conv
    params = 3 * 16 * 16 * c + c + n * c  # conv + position table
    # q, k, v, o (4 GEMMs N x C x C), QK^T and AV (2 * 2 * N^2 * C), fc1 and fc2 (2 * 2 * N * C * F)
    flops += layers * (4 * 2 * n * c * c + 2 * 2 * n * n * c + 2 * 2 * n * c * f)
    params += layers * (2 * 2 * c + 4 * (c * c + c) + 2 * c * f + f + c)
    params += 2 * c  # post LayerNorm
    # head: q of the one probe (C x C), packed k/v (N x C x 2C), scores and AV over N keys, out_proj, MLP
    flops += 2 * c * c + 2 * n * c * 2 * c + 2 * 2 * n * c + 2 * c * c + 2 * 2 * c * f
    params += c + 3 * (c * c + c) + (c * c + c) + 2 * c + 2 * c * f + f + c
    return flops, params


CASES = {
    # spec: (transformers class, hand arithmetic, forward TC FLOPs, params, train TC FLOPs)
    "convnext_tiny": ("ConvNextModel", convnext_tiny_numbers, 8_909_526_528, 27_820_128, 26_699_678_208),
    "swin_tiny": ("SwinModel", swin_tiny_numbers, 8_979_597_312, 27_519_354, 27_050_032_128),
    "siglip_b16": ("SiglipVisionModel", siglip_b16_numbers, 35_416_584_192, 92_884_224, 106_726_926_336),
}


# swin_tiny's patch-merging reshapes take ~3 s of symbolic shape checks to load: slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "swin_tiny" else n
                                  for n in sorted(CASES)])
def test_vision_spec_totals_match_hand_arithmetic(name):
    _, numbers, fwd_tc, params, train_tc = CASES[name]
    model = load(ROOT / "specs" / f"{name}.yaml")
    flops, hand_params = numbers()
    forward = model.evaluate("forward")
    assert flops == fwd_tc and hand_params == params
    assert (forward.tc, forward.params) == (fwd_tc, params)
    assert model.evaluate("train").tc == train_tc


@pytest.mark.slow
@pytest.mark.parametrize("pass_", ["forward", "train"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_vision_spec_against_transformers(name, pass_):
    pytest.importorskip("transformers")
    from costspec.against.check import validate_against
    from costspec.against.target import load_target

    hf_class, _, fwd_tc, params, train_tc = CASES[name]
    model = load(ROOT / "specs" / f"{name}.yaml")
    values = model.bind()
    real = load_target(f"hf:{hf_class}", model, values, "meta", None, {}, output="pooler_output")
    result = validate_against(model, values, real, pass_)
    assert result.ok, "\n".join(result.failures())
    total = result.phases["forward"].rows[-1]
    assert total.real_matmul == total.spec_matmul == fwd_tc
    assert total.real_params == params
    if pass_ == "train":
        back = result.phases["backward"].rows[-1]
        # reconciled by the named rules (SDPA's math decomposition on meta; FlopCounterMode's grouped-conv
        # weight-gradient formula, which ignores groups, for ConvNeXt's depthwise convs)
        assert back.real_reconciled == back.spec_matmul == train_tc - fwd_tc


@pytest.mark.slow
def test_output_field_errors_are_usage_errors():
    from tests.common import invoke

    alone = invoke("validate", "specs/convnext_tiny.yaml", "--output-field", "pooler_output")
    assert alone.returncode == 2 and "--output-field needs --against" in alone.stderr
    wrong = invoke("validate", "specs/convnext_tiny.yaml", "--against", "hf:ConvNextModel", "--output-field",
                    "pooled")
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr
    assert "--output-field pooled: the real model's output (BaseModelOutputWithPoolingAndNoAttention) has no " \
           "tensor of that name (its fields: last_hidden_state, pooler_output)" in wrong.stderr
