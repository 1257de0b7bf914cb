"""The note printed with train / backward numbers when attention follows `backend: flash`."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from costspec.tree.network import Network

FLASH_TRAIN_NOTE = ("note: attention uses `backend: flash` (the default): its backward recomputes QK^T as GPU "
                    "flash kernels do, so train/backward FLOPs are 1-4% above torch's FlopCounterMode on CPU or "
                    "meta tensors (the math decomposition); set `backend: math` on the attention layers to match it")


def uses_flash(model: Network) -> bool:
    """True when some attention layer of `model` follows `backend: flash`."""
    return any(getattr(node.call.attrs, "backend", None) == "flash" for node in model.op_nodes())


def flash_note(pass_: str, flash: bool) -> str | None:
    """FLASH_TRAIN_NOTE when `pass_` runs a backward and `flash` (`uses_flash`) holds."""
    return FLASH_TRAIN_NOTE if flash and pass_ in ("train", "backward") else None


def flash_backward_note(model: Network, pass_: str) -> str | None:
    """FLASH_TRAIN_NOTE when `pass_` runs a backward through an attention layer with backend flash."""
    if pass_ not in ("train", "backward"):
        return None
    return flash_note(pass_, uses_flash(model))
