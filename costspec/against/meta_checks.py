"""Value checks of a transformers model that meta tensors cannot answer, taken as passing during a forward on meta.

A multimodal transformers model (Gemma 3, LLaVA, PaliGemma...) checks that its input ids hold as many image
placeholder tokens as the vision tower gave features (`torch_compilable_check(n_image_tokens * width ==
image_features.numel())`, which ends in `torch._check_tensor_all_with` on a boolean tensor): on meta the
tensor holds no value (`Tensor.item() cannot be called on meta tensors`). validate --against builds its ids
without values on meta, so the check is taken as true there, and the run says so (`META_CHECK_NOTE`); the
work around it (the compare, the count, the masked scatter) still runs and is counted. On cpu nothing is
patched: the check runs on the ids it is given.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

META_CHECK_NOTE = ("a check on a tensor's value (transformers' torch_compilable_check: the image placeholder tokens "
                   "against the image features) is taken as true on meta, where tensors hold no values; the work "
                   "around it still runs and is counted")


def forward_with(module: "torch.nn.Module", owner: Any, name: str, replacement: Any) -> None:
    """From now on `module`'s forward runs with `owner.name` replaced by `replacement`, the original put back
    after each call (however it ends)."""
    forward = module.forward
    original = getattr(owner, name)

    def patched(*args: Any, **kwargs: Any) -> Any:
        setattr(owner, name, replacement)
        try:
            return forward(*args, **kwargs)
        finally:
            setattr(owner, name, original)

    object.__setattr__(module, "forward", patched)


def skip_meta_value_checks(module: "torch.nn.Module", described: list[str]) -> None:
    """Run `module`'s forward with `torch._check_tensor_all_with` passing a meta condition (said once in
    `described`); any other condition is checked as before."""
    import torch

    original = torch._check_tensor_all_with

    def check(error_type: Any, cond: Any, message: Any = None) -> None:
        if isinstance(cond, torch.Tensor) and cond.is_meta:
            if META_CHECK_NOTE not in described:
                described.append(META_CHECK_NOTE)
            return
        original(error_type, cond, message)

    forward_with(module, torch, "_check_tensor_all_with", check)
