"""costspec.ops.norm: batch and group norms (train and eval statistics, shape errors)."""
from __future__ import annotations

import pytest

from costspec.core.errors import SpecError
from tests.ops.helpers import builder, forward, params

spec = builder(dims="{B: 2}", input_="[B, 4, 10]")


def test_batchnorm_train_and_eval_cost_differently_and_keep_running_stats_out_of_the_params():
    train = spec("- batchnorm: {}", input_="[B, 4, 5, 6]")
    frozen = spec("- batchnorm: {mode: eval}", input_="[B, 4, 5, 6]")
    n = 2 * 4 * 5 * 6
    assert forward(train)[1] == {"batchnorm": n}
    assert forward(frozen)[1] == {"batchnorm_eval": n}
    assert int(train.cost().cuda.xreplace(train.bind())) == 7 * n  # batch statistics: 7 FLOPs/element
    assert int(frozen.cost().cuda.xreplace(frozen.bind())) == 2 * n  # per-channel scale and shift
    assert params(train) == params(frozen) == 2 * 4  # gamma, beta; running mean/var are buffers
    module, _ = train.to_torch()
    assert sorted(dict(module.named_buffers())) == ["bn.running_mean", "bn.running_var"]


def test_batchnorm_and_groupnorm_shape_errors():
    with pytest.raises(SpecError, match=r"more than one value per channel"):
        spec("- batchnorm: {}", dims="{B: 1}", input_="[B, 4]")
    spec("- batchnorm: {mode: eval}", dims="{B: 1}", input_="[B, 4]")  # eval mode needs no batch statistics
    with pytest.raises(SpecError, match=r"channels 4 not divisible by groups 3"):
        spec("- groupnorm: {groups: 3}")
    with pytest.raises(SpecError, match=r"batchnorm needs an input \[B, C, \.\.\.\]"):
        spec("- batchnorm: {}", input_="[8]")


def test_grn_counts_one_grn_element_per_input_element_and_two_vectors_of_parameters():
    model = spec("- grn: {}", input_="[B, 3, 5, 8]")
    n = 2 * 3 * 5 * 8
    assert forward(model)[1] == {"grn": n}
    assert int(model.cost().cuda.xreplace(model.bind())) == 6 * n
    assert params(model) == 2 * 8  # gamma and beta over the channels (the last dim)
    module, _ = model.to_torch()
    assert sorted(p.shape[-1] for p in module.parameters()) == [8, 8]
    with pytest.raises(SpecError, match=r"grn needs a channels-last input \[B, H, W, C\]"):
        spec("- grn: {}")
