"""Imported T5 against its transformers classes on meta: the whole T5ForConditionalGeneration (the default: the
encoder, the decoder over decoder_input_ids with its causal one-directional bias and its cross-attention, one
token table shared by both lookups and the LM head, the output scale of T5 v1.0) and the encoder alone
(--tower encoder: T5EncoderModel). Forward and train: no failing row, matmul FLOPs and parameters exactly equal.
The transformers-default config exact at batch 1; refusals name the key; random valid configs (slow)."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hypothesis import assume, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from costspec.against.check import summary  # noqa: E402
from costspec.cli import main  # noqa: E402
from costspec.core.errors import UsageError  # noqa: E402
from costspec.importer import import_hf  # noqa: E402
from costspec.model import load, loads  # noqa: E402
from tests.common import ROOT  # noqa: E402
from tests.importer.check import (  # noqa: E402
    assert_exact,
    assert_refused,
    hostile_sweep,
    import_and_check,
    import_and_check_file,
    read_keys,
    write_config,
)

SMALL = {"d_model": 64, "d_kv": 16, "d_ff": 96, "num_layers": 2, "num_heads": 4, "vocab_size": 100}
DIMS = {"S": 6, "T": 5}  # encoder and decoder tokens: short, unequal
CONFIGS = {
    # T5 v1.0: relu MLP, tied (the decoder's output scaled by d_model**-0.5), more decoder blocks than encoder's
    "v1_0": lambda: transformers.T5Config(**SMALL, num_decoder_layers=3),
    # T5 v1.1 / Flan-T5's shape (untied: no output scale) with a gated MLP whose activation is priced exactly
    "v1_1_gated_silu": lambda: transformers.T5Config(**SMALL, feed_forward_proj="gated-silu", tie_word_embeddings=False,
                                                     num_decoder_layers=1),
    "one_block": lambda: transformers.T5Config(**{**SMALL, "num_layers": 1}),  # no block reads a shared bias
    "wide_heads": lambda: transformers.T5Config(**{**SMALL, "d_kv": 24}, relative_attention_num_buckets=8,
                                                relative_attention_max_distance=20),  # heads*d_kv != d_model
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_whole_model_matches_transformers(name, tmp_path):
    model, results = import_and_check(CONFIGS[name](), tmp_path, dims=DIMS)
    totals = assert_exact(results)
    assert totals["forward"]["spec_matmul"] > 0 and totals["backward"]["spec_matmul"] > 0
    assert "decoder_input_ids" in model.doc.data["inputs"]


def test_one_decoder_token_runs_no_causal_where(tmp_path):
    """T = 1 (a generation step without a cache): transformers' SDPA path skips the causal mask (one query sees
    its one key), so no where keeps the bias below the diagonal; the spec's where is 0 there too."""
    _, results = import_and_check(CONFIGS["one_block"](), tmp_path, dims={"S": 3, "T": 1}, batch=1)
    assert_exact(results)


@pytest.mark.parametrize("name", ["v1_0", "one_block"])
def test_encoder_tower_matches_t5_encoder_model(name, tmp_path):
    path = write_config(CONFIGS[name](), tmp_path)
    imported = import_hf(path, tower="encoder")
    assert imported.described == "T5EncoderModel" and "--against hf:T5EncoderModel" in imported.text
    results = import_and_check_file(path, dims={"S": 6}, tower="encoder")
    assert_exact(results)


def _rows(text: str, batch: int = 1, dims: dict | None = None) -> dict:
    model = loads(text)
    return {row.name: row for row in model.report("forward", model.bind(batch, dims or DIMS)).rows}


def test_output_scale_follows_t5s_versions(tmp_path):
    """v1.0 (tie_word_embeddings true, the default) scales the decoder's B*T*C outputs by d_model**-0.5; v1.1
    (false) does not, and a config naming scale_decoder_outputs (as T5Config.to_dict writes it) wins. The head
    reads the shared table either way (transformers 5's T5Config ties it): no parameters of its own."""
    T, C, V = DIMS["T"], SMALL["d_model"], SMALL["vocab_size"]
    v10 = _rows(import_hf(write_config(transformers.T5Config(**SMALL), tmp_path)).text, batch=2)
    assert v10["decoder_output_scale"].cuda_flops == 2 * T * C
    assert v10["lm_head"].tc_flops == 2 * 2 * T * C * V and v10["lm_head"].params == 0
    assert v10["embed"].params == V * C and v10["decoder_embed"].params == 0
    for data in ({**transformers.T5Config(**SMALL).to_dict(), "tie_word_embeddings": False,
                  "scale_decoder_outputs": None},
                 transformers.T5Config(**SMALL, tie_word_embeddings=False).to_dict()):
        assert "decoder_output_scale" not in _rows(import_hf(write_config(data, tmp_path)).text)
    forced = {**transformers.T5Config(**SMALL).to_dict(), "tie_word_embeddings": False, "scale_decoder_outputs": True}
    assert "decoder_output_scale" in _rows(import_hf(write_config(forced, tmp_path)).text)


def test_cross_attention_prices_the_zero_position_bias(tmp_path):
    """q and o over the decoder's T rows, k and v over the encoder's S states, QK^T and AV over T x S, and the
    zero position bias transformers adds to every score (B*heads*T*S adds)."""
    rows = _rows(import_hf(write_config(transformers.T5Config(**SMALL, num_decoder_layers=3), tmp_path)).text)
    S, T, C, h, d = DIMS["S"], DIMS["T"], SMALL["d_model"], SMALL["num_heads"], SMALL["d_kv"]
    cross = rows["decoder[others].attn2"]
    per_layer = 2 * (2 * T * C * h * d) + 2 * (2 * S * C * h * d) + 2 * 2 * T * S * h * d
    assert cross.tc_flops == 2 * per_layer  # the two later decoder blocks
    assert "zero_bias: true" in import_hf(tmp_path / "config.json").text


def test_gated_gelu_differs_only_by_gelu_new_ops(tmp_path):
    """feed_forward_proj gated-gelu (T5 v1.1, Flan-T5) runs transformers' gelu_new, python-level ops the spec
    prices as one gelu_tanh (the note in the spec says so): matmul FLOPs and parameters exact, every difference
    in those kinds."""
    config = transformers.T5Config(**SMALL, feed_forward_proj="gated-gelu", tie_word_embeddings=False)
    _, results = import_and_check(config, tmp_path, passes=("train",), dims=DIMS)
    text = import_hf(tmp_path / "config.json").text
    assert "fn: gelu_tanh" in text and "feed_forward_proj gated-gelu (gelu_new)" in text
    gelu_new = {"gelu_tanh", "gelu_tanh_backward", "tanh", "tanh_backward", "cube", "square", "add", "mul", "scale"}
    for phase in results["train"].phases.values():
        total = phase.rows[-1]
        assert total.real_params == total.spec_params
        assert {kind for _, kind, _, _ in phase.failures} <= gelu_new, phase.failures
    assert all(t["real_reconciled"] == t["spec_matmul"] for t in summary(results["train"]).values())


def test_default_config_is_exact_at_batch_one(tmp_path):
    """T5Config() (t5-small: 6 + 6 blocks, S = T = 512, as imported): the spec's matmul FLOPs at batch 1 equal
    FlopCounterMode over T5ForConditionalGeneration's forward on meta, its parameters the class's."""
    from torch.utils.flop_counter import FlopCounterMode

    config = transformers.T5Config()
    path = write_config(config, tmp_path)
    model = loads(import_hf(path, dtype="bf16").text)
    report = model.report("forward", model.bind(1))
    with torch.device("meta"):
        real = transformers.T5ForConditionalGeneration(config)
    ids = torch.zeros(1, 512, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as counter:
        real(input_ids=ids, decoder_input_ids=ids)
    assert report.tc == counter.get_total_flops()
    assert report.params == sum(p.numel() for p in real.parameters())


def test_encoder_tower_reproduces_the_zoo_spec(tmp_path):
    """t5-small's hub config.json (with the legacy keys its config class no longer writes) as --tower encoder: the
    zoo's t5_small_encoder numbers."""
    data = {**transformers.T5Config().to_dict(), "n_positions": 512, "output_past": True}
    imported = loads(import_hf(write_config(data, tmp_path), dtype="bf16", tower="encoder").text)
    zoo = load(ROOT / "specs/t5_small_encoder.yaml")
    got, want = imported.report("train", imported.bind(2)), zoo.report("train", zoo.bind(2))
    assert (got.tc, got.cuda, got.params) == (want.tc, want.cuda, want.params)


def test_the_header_and_the_check_command_name_the_class(tmp_path, capsys):
    path = write_config(transformers.T5Config(**SMALL), tmp_path)
    whole, encoder = tmp_path / "whole.yaml", tmp_path / "encoder.yaml"
    main(["import", "hf", str(path), "-o", str(whole)])
    assert f"--against hf:T5ForConditionalGeneration --config {path} --pass train" in capsys.readouterr().err
    main(["import", "hf", str(path), "--tower", "encoder", "-o", str(encoder)])
    assert f"--against hf:T5EncoderModel --config {path} --pass train" in capsys.readouterr().err
    assert "transformers' T5ForConditionalGeneration" in whole.read_text()
    assert "num_decoder_layers 2 decoder blocks and the LM head are not imported" in encoder.read_text()
    assert "precision: {dtype: bf16}" in whole.read_text()  # the config names no dtype


@pytest.mark.parametrize("key, value, message", [
    ("feed_forward_proj", "gated-swish-relu", "expected an activation or gated-<activation>"),
    ("feed_forward_proj", "mish", "an activation the importer does not price"),
    ("relative_attention_max_distance", 4, "a max distance above buckets / 4"),
    ("relative_attention_max_distance", 16, "the decoder's one-directional buckets need a max distance above "
                                            "buckets / 2"),
    ("tie_word_embeddings", "yes", "tie_word_embeddings = 'yes': expected true or false"),
    ("scale_decoder_outputs", 1, "scale_decoder_outputs = 1: expected true or false"),
    ("num_decoder_layers", 0, "num_decoder_layers = 0: expected a whole number >= 1"),
    ("rotary_dim", 8, "rotary_dim not understood by the t5 importer"),
])
def test_configs_the_importer_cannot_price_are_refused(key, value, message, tmp_path, capsys):
    assert_refused(tmp_path, capsys, {**transformers.T5Config(**SMALL).to_dict(), key: value}, message, key)


def test_hostile_values_in_every_key_are_refused_naming_the_file(tmp_path):
    """Each key T5's importer reads, given hostile values in turn (huge, negative, zero, fractional, strings,
    lists, null...): the spec loads or the import is a CostspecError naming the file, never another exception."""
    base = {**transformers.T5Config().to_dict(), "num_layers": 2, "num_decoder_layers": 2}
    keys = read_keys(base)
    refused, tried = hostile_sweep(base, tmp_path, keys, per_key=2)
    assert tried == 2 * len(keys) and refused > len(keys) // 2


def test_the_encoder_alone_keeps_the_encoders_bucket_rule(tmp_path):
    """max_distance 16 with 32 buckets: the decoder's one-directional buckets refuse it, the encoder takes it."""
    path = write_config({**transformers.T5Config(**SMALL).to_dict(), "relative_attention_max_distance": 16}, tmp_path)
    assert import_hf(path, tower="encoder").described == "T5EncoderModel"


def test_towers_other_than_encoder_are_refused(tmp_path, capsys):
    path = write_config(transformers.T5Config(**SMALL), tmp_path)
    with pytest.raises(UsageError, match="--tower vision: the t5 importer takes --tower encoder"):
        import_hf(path, tower="vision")
    clip = write_config(transformers.CLIPConfig(), tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["import", "hf", str(clip), "--tower", "encoder"])
    assert exc.value.code == 2 and "--tower encoder: the clip importer takes --tower vision | text | both" in (
        capsys.readouterr().err)


def test_an_encoder_checkpoints_config_points_at_the_encoder_tower(tmp_path):
    data = {**transformers.T5Config(**SMALL).to_dict(), "architectures": ["T5EncoderModel"]}
    path = write_config(data, tmp_path)
    assert "costspec import hf --tower encoder` imports that" in import_hf(path).text
    assert "architectures name" not in import_hf(write_config(transformers.T5Config(**SMALL), tmp_path)).text


def test_num_decoder_layers_default_to_num_layers(tmp_path):
    data = transformers.T5Config(**SMALL).to_dict()
    data.pop("num_decoder_layers")
    text = import_hf(write_config(data, tmp_path)).text
    assert "LD: {value: 2, doc: decoder blocks}" in text
    assert json.loads((tmp_path / "config.json").read_text())["num_layers"] == 2


# ----------------------------------------------------------------------------------------------
# Random valid configs (hypothesis)
# ----------------------------------------------------------------------------------------------
@pytest.mark.slow
@settings(max_examples=5, deadline=None)
@given(heads=st.integers(1, 4), d_kv=st.sampled_from([4, 8, 12]), width=st.sampled_from([16, 24, 32]),
       layers=st.integers(1, 3), decoder_layers=st.integers(1, 3), d_ff=st.integers(4, 48),
       buckets=st.integers(4, 16), distance=st.integers(3, 40),
       proj=st.sampled_from(["relu", "gated-relu", "gated-silu", "gelu", "silu"]), tied=st.booleans(),
       batch=st.integers(1, 3), s=st.integers(1, 9), t=st.integers(1, 9))
# one head over three layers each: the repeated layers' recorded attention runs need not be alike
@example(heads=1, d_kv=4, width=16, layers=3, decoder_layers=3, d_ff=4, buckets=4, distance=3, proj="relu",
         tied=True, batch=1, s=3, t=2)
@example(heads=1, d_kv=4, width=16, layers=1, decoder_layers=1, d_ff=4, buckets=4, distance=3, proj="relu",
         tied=False, batch=1, s=1, t=1)  # one decoder token: no causal where
def test_random_t5(heads, d_kv, width, layers, decoder_layers, d_ff, buckets, distance, proj, tied, batch, s, t):
    assume(width % heads == 0)  # the importer refuses heads that do not divide d_model
    distance = max(distance, buckets // 2 + 1)
    config = transformers.T5Config(d_model=width, d_kv=d_kv, num_heads=heads, num_layers=layers, d_ff=d_ff,
                                   num_decoder_layers=decoder_layers, vocab_size=64,
                                   relative_attention_num_buckets=buckets, relative_attention_max_distance=distance,
                                   feed_forward_proj=proj, tie_word_embeddings=tied)
    with tempfile.TemporaryDirectory() as folder:
        _, results = import_and_check(config, Path(folder), batch=batch, dims={"S": s, "T": t})
        assert_exact(results)


@pytest.mark.slow
@settings(max_examples=5, deadline=None)
@given(heads=st.integers(1, 4), d_kv=st.sampled_from([4, 8, 12]), width=st.sampled_from([16, 24, 32]),
       layers=st.integers(1, 3), d_ff=st.integers(4, 48), buckets=st.integers(4, 16), distance=st.integers(5, 40),
       proj=st.sampled_from(["relu", "gated-relu", "gated-silu", "gelu", "silu"]), batch=st.integers(1, 3))
def test_random_t5_encoder(heads, d_kv, width, layers, d_ff, buckets, distance, proj, batch):
    assume(width % heads == 0)
    distance = max(distance, buckets // 4 + 1)
    config = transformers.T5Config(d_model=width, d_kv=d_kv, num_heads=heads, num_layers=layers, d_ff=d_ff,
                                   vocab_size=64, relative_attention_num_buckets=buckets,
                                   relative_attention_max_distance=distance, feed_forward_proj=proj)
    with tempfile.TemporaryDirectory() as folder:
        path = write_config(config, Path(folder))
        assert_exact(import_and_check_file(path, batch=batch, dims={"S": 8}, tower="encoder"))
