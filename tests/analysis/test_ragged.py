"""Ragged batches: padded (B x max) vs packed (sum over sequences) costs, the CLI, and the packed
cost checked against per-sequence runs of the generated module under FlopCounterMode."""
from __future__ import annotations

import pytest

from costspec.analysis.ragged import parse_lengths, ragged, ragged_totals, read_lengths_file
from costspec.core.errors import CostspecError, UsageError
from costspec.model import load, loads
from tests.common import ROOT
from tests.common import invoke as cli

SPECS = ROOT / "specs"

# A two-block encoder with a free sequence dim: attention (non-causal, math backend as CPU runs it) and an MLP.
TINY = """
costspec: 1
name: tiny_encoder
dims:
  B: {value: 2}
  S: {value: 16}
  C: {value: 32}
input: [B, S, C]
precision: {dtype: bf16}
layers:
  - repeat: 2
    name: blocks
    body:
      - residual:
          - layernorm: {}
          - attention: {heads: 4, backend: math}
      - residual:
          - layernorm: {}
          - mlp: {hidden: 4*C}
"""




def test_the_notes_example_3_5_2():
    """The notes: lengths [3, 5, 2] padded to 5 load 15 elements for 10 useful (33% waste); attention's
    S^2 terms are B*max^2 = 3*25 = 75 vs 9 + 25 + 4 = 38."""
    result = ragged(load(SPECS / "gpt2_small.yaml"), [3, 5, 2])
    assert (result.meta["tokens_padded"], result.meta["tokens_packed"]) == (15, 10)
    assert (result.meta["s2_padded"], result.meta["s2_packed"]) == (75, 38)
    table = result.table
    # every per-token layer wastes exactly 5/15 of its FLOPs
    assert table.row("lm_head").get("padded_flops") == 2 * 15 * 768 * 50257
    assert table.row("lm_head").get("packed_flops") == 2 * 10 * 768 * 50257
    # the SDPA matmuls: 2*h*pairs*(d+d) per problem, pairs = s^2 -> 12 layers x 2*12*64*2 * (75 vs 38)
    sdpa = table.row("h.attn.sdpa")
    matmul = 12 * 2 * 12 * 2 * 64
    assert sdpa.get("padded_flops") - sdpa.get("packed_flops") >= matmul * (75 - 38)
    assert "33.3% of the padded tokens are padding" in result.notes[0]
    assert "ratio 1.974" in result.notes[1]  # 75 / 38


def test_llama_1b_lengths_32_512_128():
    totals = ragged_totals(load(SPECS / "llama_1b.yaml"), [32, 512, 128])
    # padded = the model at B=3, S=512; packed = the sum of the model at B=1, S=32 / 512 / 128
    model = load(SPECS / "llama_1b.yaml")
    assert totals["padded_flops"] == model.evaluate(B=3, S=512).total
    assert totals["packed_flops"] == sum(model.evaluate(B=1, S=s).total for s in (32, 512, 128))
    assert totals["padded_flops"] == 3_904_024_608_768 and totals["packed_flops"] == 1_699_323_838_464
    assert totals["waste_flops"] == totals["padded_flops"] - totals["packed_flops"]


def test_bytes_count_weights_once_when_packed():
    """Packed bytes = the per-sequence sum less the weights read (len - 1) extra times."""
    model = loads(TINY)
    one = ragged_totals(model, [16])
    assert one["padded_bytes"] == one["packed_bytes"]  # one sequence: nothing padded
    two = ragged_totals(model, [16, 16])
    assert two["padded_bytes"] == two["packed_bytes"] and two["waste_flops"] == 0


def test_packed_equals_per_sequence_flop_counter_runs():
    """FlopCounterMode on the generated module at B=1, S=s_i, summed, is the packed matmul FLOPs (on meta
    tensors, where SDPA runs PyTorch's math decomposition and its matmuls are counted; torch's fused CPU
    kernel is not counted, see `costspec validate`'s sdpa rules)."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    model = loads(TINY)
    lengths = [3, 5, 2, 7]
    measured = 0
    for s in lengths:
        with torch.device("meta"):
            module, make_input = model.to_torch(B=1, S=s)
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            module(make_input("meta", torch.float32))
        measured += counter.get_total_flops()
    analytic_tc = sum(model.evaluate(B=1, S=s).tc for s in lengths)
    assert measured == analytic_tc
    totals = ragged_totals(model, lengths)
    assert totals["packed_flops"] == sum(model.evaluate(B=1, S=s).total for s in lengths)
    assert totals["padded_flops"] == model.evaluate(B=4, S=7).total


def test_lengths_parsing_and_files(tmp_path):
    assert parse_lengths("3,5,2") == [3, 5, 2]
    with pytest.raises(CostspecError, match="item 2: 'x'"):
        parse_lengths("3,x")
    with pytest.raises(CostspecError, match="at least 1"):
        parse_lengths("3,0")
    f = tmp_path / "lengths.txt"
    f.write_text("3\n\n5  # long one\n2\n")
    assert read_lengths_file(f) == [3, 5, 2]
    f.write_text("3\nfive\n")
    with pytest.raises(CostspecError, match=r"lengths.txt:2: 'five'"):
        read_lengths_file(f)


def test_a_derived_or_missing_sequence_dim_is_refused():
    with pytest.raises(UsageError, match="derived"):
        ragged(load(SPECS / "vit_b.yaml"), [3, 4])
    with pytest.raises(UsageError, match="does not define"):
        ragged(loads(TINY), [3, 4], seq_dim="T")
    with pytest.raises(UsageError, match="conflicts"):
        ragged(loads(TINY), [3, 4], sets={"S": 8})


def test_the_batch_dim_as_sequence_dim_is_refused(capsys):
    """`--seq-dim B` printed a table with negative waste and exit 0: the batch dim cannot be the sequence dim."""
    with pytest.raises(UsageError, match=r"--seq-dim B is the batch dim: .* \(expected the spec's sequence dim"):
        ragged(loads(TINY), [3, 4], seq_dim="B")
    from costspec.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["eval", str(SPECS / "gpt2_small.yaml"), "--lengths", "3,5,2", "--seq-dim", "B"])
    assert exit_.value.code == 2 and "--seq-dim B is the batch dim" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_eval_and_sweep(tmp_path):
    out = cli("eval", str(SPECS / "gpt2_small.yaml"), "--lengths", "3,5,2")
    assert out.returncode == 0, out.stderr
    assert "padded FLOPs" in out.stdout and "packed FLOPs" in out.stdout and "33.3%" in out.stdout
    f = tmp_path / "l.txt"
    f.write_text("3\n5\n2\n")
    out = cli("eval", str(SPECS / "gpt2_small.yaml"), "--lengths-file", str(f), "--format", "json")
    assert out.returncode == 0 and '"tokens_packed": 10' in out.stdout
    out = cli("sweep", str(SPECS / "llama_1b.yaml"), "--vary", "L=1,16", "--lengths", "32,512,128")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("L,padded_flops,packed_flops") and lines[2].startswith("16,3904024608768,1699323838464,")
    bad = cli("eval", str(SPECS / "vit_b.yaml"), "--lengths", "3,4")
    assert bad.returncode == 2 and "derived" in bad.stderr and "Traceback" not in bad.stderr


def test_depth_limits_the_rows():
    rows = ragged(load(SPECS / "llama_1b.yaml"), [32, 512, 128], depth=1).table.rows
    assert [r.name for r in rows] == ["embed_tokens", "layers", "norm", "lm_head"]


def test_lengths_and_batch_conflict():
    out = cli("eval", str(SPECS / "gpt2_small.yaml"), "--lengths", "3,5", "--batch", "2")
    assert out.returncode == 2 and "drop --batch" in out.stderr
    out = cli("eval", str(SPECS / "gpt2_small.yaml"), "--lengths", "3,5", "--lengths-file", __file__)
    assert out.returncode == 2 and "not both" in out.stderr


def test_parse_lengths_never_crashes():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=300, deadline=None)
    @given(st.text(alphabet="0123456789,_- x\n#", max_size=30))
    def check(text):
        try:
            out = parse_lengths(text)
        except CostspecError as exc:
            assert "\n" not in str(exc) or "\n" in text
            return
        assert out and all(isinstance(v, int) and v >= 1 for v in out)
        assert len(out) == text.count(",") + 1

    check()
