"""meta_checks: a check on a tensor's value (torch._check_tensor_all_with, which transformers'
torch_compilable_check ends in) passes on meta during the forward, said once; a real tensor is still checked,
and the patch is gone after the forward."""
from __future__ import annotations

import pytest

from costspec.against.meta_checks import META_CHECK_NOTE, skip_meta_value_checks

torch = pytest.importorskip("torch")


class Checked(torch.nn.Module):
    """Checks that its input holds no zero, as transformers checks a placeholder count."""

    def forward(self, x):
        torch._check_tensor_all_with(ValueError, (x != 0).all(), lambda: "a zero")
        return x * 2


def test_meta_value_checks_pass_on_meta_and_are_said():
    module, described = Checked(), []
    with pytest.raises(RuntimeError, match="meta tensors"):
        module(torch.zeros(3, device="meta"))  # as transformers' check fails on meta
    skip_meta_value_checks(module, described)
    out = module(torch.zeros(3, device="meta"))
    module(torch.zeros(3, device="meta"))
    assert out.shape == (3,) and out.is_meta and described == [META_CHECK_NOTE]


def test_real_values_are_still_checked():
    module, described = Checked(), []
    skip_meta_value_checks(module, described)
    assert module(torch.ones(2)).tolist() == [2.0, 2.0]
    with pytest.raises(ValueError, match="a zero"):
        module(torch.zeros(2))
    assert described == []
    original = torch._check_tensor_all_with
    assert original.__module__.startswith("torch")  # restored after each forward
