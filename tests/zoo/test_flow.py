"""The zoo specs that need the dataflow (branches, joins, named values), checked against transformers on `meta`:
resnet50 (projection shortcuts) against ResNetModel, pythia_160m (parallel residual, partial rotary)
against GPTNeoXModel. Forward and train: exact matmul FLOPs and parameters, every other difference
through a named rule. Each check builds and counts a full-size model (several seconds): slow."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from costspec.against.check import summary, validate_against  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.model import load, loads  # noqa: E402
from tests.common import ROOT  # noqa: E402

STAGE = """
costspec: 1
name: stage
doc: a projecting block then identity blocks, all in one list of the real model
dims:
  B: {value: 2, doc: batch}
  C: {value: 8, doc: input channels}
  D: {value: 16, doc: output channels}
  N: {value: 3, doc: blocks}
input: [B, C, 4, 4]
layers:
  - sequence:
      - residual:
          body:
            - conv2d: {out: D, kernel: 1, bias: false}
              name: body
              source: layers.0.body
          shortcut:
            - conv2d: {out: D, kernel: 1, bias: false}
              name: proj
              source: layers.0.proj
      - repeat: N - 1
        name: rest
        body:
          - residual:
              - conv2d: {out: D, kernel: 1, bias: false}
                source: conv
        source: layers
    name: stage
    source: stage
"""


@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_repeat_instances_continue_after_claimed_children(pass_):
    """A repeat's `source:` container whose first child an earlier layer took (ResNet's stage):
    instances are layers.1 and layers.2, not layers.0 and layers.1."""
    model = loads(STAGE)
    values = model.bind()
    result = validate_against(model, values, load_target("tests.zoo.flow_models:stage", model, values, "meta"), pass_)
    assert result.ok, "\n".join(result.failures())
    assert result.rowmap.matches["stage.rest"].paths == ["stage.layers.1", "stage.layers.2"]
    assert result.rowmap.matches["stage.rest.conv"].paths == ["stage.layers.1.conv", "stage.layers.2.conv"]
    assert not result.rowmap.unmatched_real


PYTHIA_SETS = {"hidden_size": "768", "num_hidden_layers": "12", "num_attention_heads": "12",
               "intermediate_size": "3072", "vocab_size": "50304", "max_position_embeddings": "2048"}
ZOO = {
    "resnet50": ("hf:ResNetModel", {}),  # ResNetConfig's defaults are microsoft/resnet-50's
    "pythia_160m": ("hf:GPTNeoXModel", PYTHIA_SETS),  # GPTNeoXConfig's partial_rotary_factor is 0.25
}

# The real models' figures at batch 1 (transformers 5.23.0 on meta, FlopCounterMode):
# ResNet-50 at 224 px: 4.087 GMACs forward; 23,508,032 parameters = 25,557,032 of the ImageNet
# classifier minus its fc (2048*1000 + 1000)
# Pythia-160M at 2048 tokens: per layer qkv 2*S*C*3C + dense 2*S*C*C + QK^T/AV 4*S^2*C + MLP 4*S*C*F;
# parameters 50304*768 + 12*(768*2304 + 2304 + 768*768 + 768 + 2*768*3072 + 3072 + 768 + 4*768) + 2*768
S, C, F, L = 2048, 768, 3072, 12
PYTHIA_FWD = L * (2 * S * C * 3 * C + 2 * S * C * C + 4 * S * S * C + 4 * S * C * F)
REAL = {
    "resnet50": {"forward_matmul": 8_174_272_512, "params": 23_508_032},
    "pythia_160m": {"forward_matmul": PYTHIA_FWD,
                    "params": 50304 * C + L * (C * 3 * C + 3 * C + C * C + C + 2 * C * F + F + C + 4 * C) + 2 * C},
}


@pytest.mark.slow
@pytest.mark.parametrize("pass_", ["forward", "train"])
@pytest.mark.parametrize("name", sorted(ZOO))
def test_flow_spec_matches_its_transformers_model(name, pass_):
    pytest.importorskip("transformers")
    target, sets = ZOO[name]
    model = load(ROOT / f"specs/{name}.yaml")
    values = model.bind()
    result = validate_against(model, values, load_target(target, model, values, "meta", None, sets), pass_)
    assert result.ok, "\n".join(result.failures())
    assert not result.rowmap.unmatched_real
    if name == "resnet50":  # the identity blocks continue after the first block, which claimed layers.0
        assert result.rowmap.matches["encoder.stage2.rest"].paths == [f"encoder.stages.1.layers.{i}" for i in (1, 2, 3)]
    totals = summary(result)
    for phase in totals.values():
        assert phase["real_reconciled"] == phase["spec_matmul"] and phase["real_params"] == phase["spec_params"]
    assert totals["forward"]["real_matmul"] == REAL[name]["forward_matmul"]
    assert totals["forward"]["real_params"] == REAL[name]["params"]


@pytest.mark.parametrize("name", sorted(ZOO))
def test_flow_spec_eval_at_batch_1(name):
    """eval's matmul FLOPs and parameters are the real model's (the figures above)."""
    report = load(ROOT / f"specs/{name}.yaml").evaluate()
    assert (report.tc, report.params) == (REAL[name]["forward_matmul"], REAL[name]["params"])
