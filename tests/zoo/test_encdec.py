"""The encoder specs of an encoder-decoder pair, T5-small's and Whisper-tiny's, and the op options they
need (T5's relative-position bias made in the first block and read by the later ones; Whisper's frozen
position table and its k projection without bias), checked against transformers on `meta`."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from costspec.against.check import validate_against  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.core.errors import SpecError  # noqa: E402
from costspec.model import load, loads  # noqa: E402
from costspec.runtime.torch_build import build_module  # noqa: E402
from costspec.runtime.validate import validate  # noqa: E402
from tests.common import ROOT  # noqa: E402

T5 = ROOT / "specs/t5_small_encoder.yaml"
WHISPER = ROOT / "specs/whisper_tiny_encoder.yaml"


def against(path, target: str, pass_: str, sets: dict[str, str] | None = None, bind: dict | None = None):
    model = load(path)
    values = model.bind(sets=bind)
    real = load_target(target, model, values, "meta", None, sets or {})
    return validate_against(model, values, real, pass_)


def totals(path) -> dict[str, int]:
    """Forward matmul FLOPs (all on Tensor Cores: the specs are bf16) and params at the defaults (B = 1)."""
    report = load(path).evaluate("forward")
    return {"matmul": report.tc, "params": int(report.table.total.values["params"])}


# ----------------------------------------------------------------------------------------------
# The specs against transformers (T5EncoderModel, WhisperEncoder), forward and train
# ----------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("pass_", ["forward", "train"])
@pytest.mark.parametrize("path, target", [(T5, "hf:T5EncoderModel"), (WHISPER, "hf:WhisperEncoder")],
                         ids=["t5_small_encoder", "whisper_tiny_encoder"])
def test_spec_matches_transformers(path, target, pass_):
    result = against(path, target, pass_)  # the classes' default configs are t5-small and whisper-tiny
    assert result.ok, "\n".join(result.failures())
    fwd = result.phases["forward"].rows[-1]
    assert fwd.real_matmul == fwd.spec_matmul and fwd.real_params == fwd.spec_params


@pytest.mark.slow
def test_t5_at_other_sizes_matches_transformers():
    """Batch 3 (the shared bias's gradient summed over the batch too), 40 tokens, 3 blocks, 4 heads of 32."""
    result = against(T5, "hf:T5EncoderModel", "train",
                     {"num_layers": "3", "num_heads": "4", "d_kv": "32", "d_model": "96", "d_ff": "160"},
                     {"B": 3, "S": 40, "L": 3, "heads": 4, "D": 32, "C": 96, "F": 160})
    assert result.ok, "\n".join(result.failures())


def test_t5_small_encoder_numbers():
    V, C, h, D, F, L, S = 32128, 512, 8, 64, 2048, 6, 512
    block = 4 * C * h * D + 2 * C * F + 2 * C  # q, k, v, o; wi, wo; two RMS norms (no biases)
    got = totals(T5)
    assert got["params"] == V * C + L * block + 32 * h + C == 35_330_816  # + the one bias table, final norm
    per_block = 2 * S * C * h * D * 4 + 2 * 2 * S * S * h * D + 2 * 2 * S * C * F  # proj, QK^T + AV, MLP
    assert got["matmul"] == L * per_block == 22_548_578_304


def test_whisper_tiny_encoder_numbers():
    M, T, S, C, F, L = 80, 3000, 1500, 384, 1536, 4
    convs = (M * C * 3 + C) + (C * C * 3 + C)
    block = (4 * C * C + 3 * C) + (C * F + F + F * C + C) + 2 * 2 * C  # k_proj has no bias; two LayerNorms
    got = totals(WHISPER)
    assert got["params"] == convs + S * C + L * block + 2 * C == 8_208_384  # the frozen position table counted
    conv_flops = 2 * T * C * M * 3 + 2 * S * C * C * 3  # conv1 (stride 1), conv2 (stride 2)
    per_block = 2 * S * C * C * 4 + 2 * 2 * S * S * C + 2 * 2 * S * C * F
    assert got["matmul"] == conv_flops + L * per_block == 36_937_728_000


# ----------------------------------------------------------------------------------------------
# T5's shared bias: costed where it is made, read by the later blocks
# ----------------------------------------------------------------------------------------------
SHARED = """
costspec: 1
name: shared_t5_bias
dims: {B: 2, S: 12, C: 16, L: 3}
precision: {dtype: fp32}
input: [B, S, C]
blocks:
  blk:
    params: {reads: true, readers: 0}
    layers:
      - residual:
          - attention: {heads: 2, fused_qkv: false, qkv_bias: false, proj_bias: false, scale: none,
                        rel_bias: t5, buckets: 8, max_distance: 20, rel_bias_shared: reads, rel_bias_readers: readers}
layers:
  - repeat: L
    name: blocks
    body: blk
    at:
      - {indices: [0], name: first, args: {reads: false, readers: READERS}}
"""


def test_shared_bias_costs_one_table_and_sums_the_readers_gradients_where_it_is_made():
    model = loads(SHARED.replace("READERS", "L - 1"))
    rows = {r.name: r for r in model.evaluate("forward").rows}
    assert rows["blocks[first].attn.rel_bias"].params == 8 * 2  # buckets x heads, once
    assert "blocks[others].attn.rel_bias" not in rows  # the readers have no table
    backward = {r.name: r for r in model.evaluate("backward").rows}
    pairs = 2 * 12 * 12  # heads x S x S
    # the table's gradient (scatter_add, 1 FLOP per element) and the 2 readers' gradients summed in (add, 1)
    assert backward["blocks[first].attn.rel_bias"].cuda_flops == pairs + 2 * pairs
    for pass_ in ("forward", "train"):
        assert validate(model, model.bind(), pass_).ok


def test_shared_bias_without_a_table_before_it_is_refused_at_build():
    model = loads(SHARED.replace("READERS", "L - 1").replace("indices: [0]", "indices: [2]"))
    with torch.device("meta"), pytest.raises(SpecError, match="no earlier attention layer has a table"):
        build_module(model, model.bind())


def test_more_readers_than_declared_is_refused_at_build():
    model = loads(SHARED.replace("READERS", "1"))
    with torch.device("meta"), pytest.raises(SpecError, match=r"more layers read the T5 bias of 'blocks\[first\].attn' than "
                                                                "its rel_bias_readers 1"):
        build_module(model, model.bind())


@pytest.mark.parametrize("attrs, message", [
    ("rel_bias_shared: true", "rel_bias_shared shares a T5 or BEiT bias between layers: set rel_bias: t5 or beit"),
    ("rel_bias: t5, rel_bias_shared: true, rel_bias_readers: 2", "has no table for others to read"),
])
def test_shared_bias_options_are_checked(attrs, message):
    spec = f"""
costspec: 1
name: bad
dims: {{B: 1, S: 8, C: 16}}
input: [B, S, C]
layers:
  - attention: {{heads: 2, {attrs}}}
"""
    with pytest.raises(SpecError, match=message):
        loads(spec)


def test_frozen_position_table_has_parameters_and_no_gradient_work():
    spec = """
costspec: 1
name: frozen_positions
dims: {B: 2, S: 6, C: 8}
precision: {dtype: fp32}
input: [B, S, C]
layers:
  - linear: {out: C}
  - position_embedding: {length: 10, trainable: TRAINABLE}
    name: pos
"""
    frozen, learned = loads(spec.replace("TRAINABLE", "false")), loads(spec.replace("TRAINABLE", "true"))
    assert {r.name: r.params for r in frozen.evaluate("forward").rows}["pos"] == 10 * 8
    assert {r.name: r.cuda_flops for r in frozen.evaluate("backward").rows}["pos"] == 0
    # learned: the table's gradient is the output gradient summed over the batch (bias_grad, 1 FLOP/element)
    assert {r.name: r.cuda_flops for r in learned.evaluate("backward").rows}["pos"] == 2 * 6 * 8
    assert validate(frozen, frozen.bind(), "train").ok
