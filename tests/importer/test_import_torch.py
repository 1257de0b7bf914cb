"""`costspec import torch` on plain-torch models (tests/importer/torch_models.py): the spec it writes equals
the real model -- FlopCounterMode's forward FLOPs and the parameter count exactly, the backward after the
named rules -- at the traced sizes and with every dim changed, one at a time; and it reads as a person
would write it (blocks per module class, repeats, residuals, saved skips, attention)."""
from __future__ import annotations

import functools

import pytest
import torch

from costspec.model import loads
from costspec.trace import import_module, import_torch

from . import torch_models
from .torch_check import against, assert_exact, flop_counter, spec_matmul

MODELS = {  # builder -> the --dim options naming its input axes
    "convnet": ["img=x:2,3"],
    "decoder": ["S=tokens:1"],
    "unet": ["img=x:2,3"],
}
CHANGED = {"B": 3, "img": 48, "S": 24, "C": 24, "L": 3, "K": 5, "heads": 8, "KV": 4, "F": 40, "V": 50}


def target(name: str) -> str:
    return f"{torch_models.__name__}:{name}"


@functools.lru_cache(maxsize=None)
def imported_spec(name: str):
    return import_torch(target(name), MODELS[name])


@pytest.fixture(params=sorted(MODELS))
def imported(request):
    return request.param, imported_spec(request.param)


def test_nothing_unmapped_and_every_argument_a_dim(imported):
    name, result = imported
    assert result.unmapped == []
    assert result.fitted.fixed == {}
    builder = getattr(torch_models, name)
    dims = set(loads(result.text).dims.symbols)
    assert {str(d) for d in dims} == set(builder.__code__.co_varnames[:builder.__code__.co_argcount])


def test_forward_equals_flop_counter_at_two_sizes_of_every_dim(imported):
    name, result = imported
    base = dict(result.fitted.dims)
    for dims in [base] + [{**base, d: CHANGED[d]} for d in base]:
        with torch.device("meta"):
            module, inputs = getattr(torch_models, name)(**dims)
        assert spec_matmul(result.text, dims) == flop_counter(module, inputs), dims


def test_train_equals_the_real_model_with_every_dim_at_two_sizes(imported):
    name, result = imported
    base = dict(result.fitted.dims)
    for dims in (base, {**base, **{d: CHANGED[d] for d in base}}):
        assert_exact(against(result.text, target(name), dims))


def test_pointwise_work_equals_too(imported):
    name, result = imported
    outcome = against(result.text, target(name), dict(result.fitted.dims))
    assert outcome.ok, outcome.failures()


def test_the_decoder_reads_as_written():
    text = imported_spec("decoder").text
    assert "attention: {heads: heads, kv_heads: KV, qkv_bias: false, proj_bias: false, fused_qkv: false,\n" in text
    assert "causal: true}" in text
    assert "  - repeat: L\n    name: layers\n    source: layers\n    body: DecoderBlock\n" in text
    assert "- rmsnorm: {}\n            name: attn_norm" in text  # the RMSNorm class, by its name
    assert "  RMSNorm" not in text  # ... not a block of pow / mean / rsqrt


def test_the_cnn_keeps_its_first_block_apart_from_the_repeat():
    text = imported_spec("convnet").text
    assert "- repeat: L - 1\n    name: stage2\n    source: stage2\n    body: InvertedResidual" in text
    assert "name: stage2_0\n    source: stage2.0" in text
    assert "join: mul" in text  # squeeze-excitation
    assert "params: {width: C" in text  # the blocks' sizes follow their input's channels
    assert "floor(width/16)" in text  # max(1, cin // 4) of the 4x expanded width: a floor division
    assert 'groups: "4*width"' in text  # the depthwise conv


def test_the_unet_saves_its_skips():
    text = imported_spec("unet").text
    assert "save: inc_out" in text and "concat: {with: inc_out, axis: 1}" in text
    assert "conv_transpose2d: {out: C, kernel: 2, stride: 2}" in text


def test_a_module_object_with_its_inputs():
    with torch.device("meta"):
        module, x = torch_models.convnet(C=8, L=1)
    result = import_module(module, x, ["img=x:2,3"], name="convnet")
    assert {str(s) for s in loads(result.text).dims.symbols} == {"B", "img"}
    assert spec_matmul(result.text, {"B": 5, "img": 64}) == flop_counter(module, torch.zeros(5, 3, 64, 64,
                                                                                          device="meta"))
