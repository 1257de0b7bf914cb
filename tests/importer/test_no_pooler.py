"""`import hf --no-pooler` for the families whose model has a pooler: the spec ends at the model's
last_hidden_state, the header names the class (and the constructor arguments that drop the pooler, where
it has them) and the printed check command; `validate --against` PASSes forward and train on meta, every
matmul FLOP and parameter equal."""
from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

from costspec.against.check import validate_against  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.cli import main  # noqa: E402
from costspec.importer import import_hf  # noqa: E402
from costspec.model import loads  # noqa: E402
from tests.importer.check import assert_exact, write_config  # noqa: E402

SMALL_ENCODER = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 48}

# model_type -> (small config, batch, the --config-set the class is built with, the spec's last layer name)
CONFIGS = {
    "convnext": (lambda: transformers.ConvNextConfig(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2,
                                                     image_size=32), 2, {}),
    "convnextv2": (lambda: transformers.ConvNextV2Config(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2,
                                                         image_size=32), 2, {}),
    "swin": (lambda: transformers.SwinConfig(embed_dim=8, depths=[2, 1], num_heads=[2, 4], window_size=2,
                                             image_size=32), 2, {"add_pooling_layer": "false"}),
    "resnet": (lambda: transformers.ResNetConfig(embedding_size=8, hidden_sizes=[16, 32], depths=[1, 1],
                                                 layer_type="bottleneck"), 2, {}),
    "vit": (lambda: transformers.ViTConfig(**SMALL_ENCODER, image_size=32, patch_size=8), 2,
            {"add_pooling_layer": "false"}),
    "deit": (lambda: transformers.DeiTConfig(**SMALL_ENCODER, image_size=32, patch_size=8), 2,
             {"add_pooling_layer": "false"}),
    # Dinov2Model has no pooler module: its pooler_output is the class token of last_hidden_state
    "dinov2": (lambda: transformers.Dinov2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=7, use_mask_token=False),
               2, {}),
    "beit": (lambda: transformers.BeitConfig(**SMALL_ENCODER, image_size=32, patch_size=8), 2,
             {"add_pooling_layer": "false"}),
    "beit_cls": (lambda: transformers.BeitConfig(**SMALL_ENCODER, image_size=32, patch_size=8,
                                                 use_mean_pooling=False), 2, {"add_pooling_layer": "false"}),
    "yolos": (lambda: transformers.YolosConfig(**SMALL_ENCODER, image_size=[16, 24], patch_size=8,
                                               num_detection_tokens=2), 2, {"add_pooling_layer": "false"}),
    # MobileNetV2's layout is fixed (16 inverted residuals): small through the depth multiplier and the image
    "mobilenet_v2": (lambda: transformers.MobileNetV2Config(depth_multiplier=0.35, image_size=45), 2,
                     {"add_pooling_layer": "false"}),
    "efficientnet": (lambda: transformers.EfficientNetConfig(
        width_coefficient=0.25, depth_coefficient=0.5, hidden_dim=320, image_size=33, in_channels=[32, 16, 24],
        out_channels=[16, 24, 40], kernel_sizes=[3, 3, 5], strides=[1, 2, 2], num_block_repeats=[1, 2, 3],
        expand_ratios=[1, 6, 6]), 2, {}),
    # BERT-like encoders: batch 1 (the position lookup's scatter-add, as tests/importer/test_encoders.py)
    "bert": (lambda: transformers.BertConfig(**SMALL_ENCODER, vocab_size=100, max_position_embeddings=40), 1,
             {"add_pooling_layer": "false"}),
    "roberta": (lambda: transformers.RobertaConfig(**SMALL_ENCODER, vocab_size=100, max_position_embeddings=42), 1,
                {"add_pooling_layer": "false"}),
    "xlm-roberta": (lambda: transformers.XLMRobertaConfig(**SMALL_ENCODER, vocab_size=100,
                                                          max_position_embeddings=42), 1,
                    {"add_pooling_layer": "false"}),
}


def imported(name, tmp_path):
    make, batch, sets = CONFIGS[name]
    path = write_config(make(), tmp_path)
    return path, import_hf(path, pooler=False), import_hf(path), batch, sets


# Dinov2Model has no pooler module (its pooler_output is the class token of last_hidden_state, no work): its
# import ends at last_hidden_state either way; --no-pooler writes the same layers, the header saying what it is
ALREADY_BARE = {"dinov2"}


def check(path, spec, batch):
    model = loads(spec.text, str(path.with_suffix(".yaml")))
    values = model.bind(batch, None)
    results = {}
    for pass_ in ("forward", "train"):
        real = load_target(f"hf:{spec.described}", model, values, "meta", str(path), spec.hf_kwargs,
                           output=spec.output)
        results[pass_] = validate_against(model, values, real, pass_)
    return model, values, assert_exact(results)


def evaluated(expr, values) -> int:
    return int(expr.subs(values))


def section(text: str, key: str) -> list[str]:
    """The lines of the top-level `key:` section of a spec."""
    lines = text.splitlines()
    start = lines.index(f"{key}:")
    end = next((i for i in range(start + 1, len(lines)) if lines[i][:1].isalpha()), len(lines))
    return lines[start + 1:end]


def layers(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.lstrip().startswith("#")]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_no_pooler_ends_at_last_hidden_state(name, tmp_path):
    path, bare, pooled, batch, sets = imported(name, tmp_path)
    assert bare.output == "last_hidden_state" and bare.hf_kwargs == sets
    assert "last_hidden_state (imported with --no-pooler)" in bare.text
    given = "".join(f" --config-set {k}={v}" for k, v in sets.items())
    assert f"--against hf:{bare.described} --config {path}{given} --output-field last_hidden_state" in bare.text
    model, values, totals = check(path, bare, batch)
    if name in ALREADY_BARE:
        assert layers(bare.text) == layers(pooled.text) and pooled.hf_kwargs == sets
        return
    whole, whole_values, whole_totals = check(path, pooled, batch)
    # the pooler has work (and, where it has weights, parameters) the --no-pooler spec leaves out
    assert totals["forward"]["spec_params"] <= whole_totals["forward"]["spec_params"]
    assert totals["forward"]["spec_matmul"] <= whole_totals["forward"]["spec_matmul"]
    assert (evaluated(model.cost("forward").flops, values)
            <= evaluated(whole.cost("forward").flops, whole_values))  # BEiT's class-token pooler: no FLOPs
    assert len(section(bare.text, "layers")) < len(section(pooled.text, "layers"))


@pytest.mark.parametrize("name, pooler", [("swin", False), ("vit", True), ("vit", False), ("bert", True),
                                          ("roberta", False)])
def test_the_printed_command_passes(name, pooler, tmp_path, capsys):
    """The `validate --against` command the header prints, run as written: PASS, forward and backward, on the
    output the header names (pooler_output by default, last_hidden_state with --no-pooler)."""
    path = write_config(CONFIGS[name][0](), tmp_path)
    out = tmp_path / f"{name}.yaml"
    assert main(["import", "hf", str(path), *([] if pooler else ["--no-pooler"]), "-o", str(out)]) in (0, None)
    command = next(line for line in out.read_text().splitlines() if line.startswith("#   costspec validate"))
    argv = command.removeprefix("#   costspec ").split()
    capsys.readouterr()
    assert main(argv) in (0, None)
    out = capsys.readouterr().out
    field = "pooler_output" if pooler else "last_hidden_state"
    assert f"--output-field {field}" in command and ("add_pooling_layer=false" in command) == (not pooler)
    assert "[forward]" in out and "[backward]" in out and out.count("result: PASS") == 1, out


@pytest.mark.parametrize("config", [
    lambda: transformers.ElectraConfig(**SMALL_ENCODER, vocab_size=100, embedding_size=16),
    lambda: transformers.DistilBertConfig(dim=32, n_layers=1, n_heads=2, hidden_dim=48, vocab_size=100),
])
def test_a_model_without_a_pooler_refuses_no_pooler(config, tmp_path, capsys):
    """ElectraModel and DistilBertModel have no pooler: --no-pooler is a usage error naming the importer."""
    data = config().to_dict()
    path = write_config(data, tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["import", "hf", str(path), "--no-pooler"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"--no-pooler: the {data['model_type']} importer does not take it" in err, err
