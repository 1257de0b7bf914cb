"""Optimizer state whose size depends on each parameter tensor's shape, not only on the parameter count:
Adafactor's factored second moments and 8-bit Adam's blockwise-quantised moments. Both take the model's
parameter tensors (`ParamTensor`: shape, trainable), which the generated module gives
(`costspec.runtime.param_tensors`), and return exact bytes.

* **adafactor** (transformers' `Adafactor`, its defaults: `beta1=None`, so no first moment): the
  gradient is taken in fp32, and the state made from it: a tensor of 2 dims or more keeps the row
  and column means of its squared gradient, `shape[:-1]` and `shape[:-2] + shape[-1:]` elements
  (`exp_avg_sq_row`, `exp_avg_sq_col`), a 1-dim tensor its full `exp_avg_sq`; all in fp32, plus
  `state["RMS"]`, a 0-dim fp32 tensor per parameter (its `step` is a Python int, on the host):
  4 x (prod(shape[:-1]) + prod(shape[:-2]) x shape[-1] + 1) bytes, or 4 x (numel + 1).
* **adam8bit** (bitsandbytes' `Adam8bit`, blockwise, bitsandbytes >= 0.44; earlier versions used
  2048-element blocks): a tensor of at least `min_8bit_size` = 4096 elements keeps both moments as
  uint8 and one fp32 absmax per block of 256 elements each: 2 x numel + 2 x 4 x ceil(numel / 256); a
  smaller one keeps both moments in fp32, 8 x numel; the two 256-entry fp32 quantisation maps
  (`dynamic`, `udynamic`) are shared by every tensor, 2048 bytes once.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

FP32 = 4
ADAM8BIT_BLOCK = 256  # bitsandbytes >= 0.44 (`blocksize = 256` in Optimizer8bit.init_state); 2048 before
ADAM8BIT_MIN_SIZE = 4096  # `min_8bit_size`: smaller tensors keep fp32 states
ADAM8BIT_QMAPS = 2 * 256 * FP32  # the signed and unsigned dynamic maps, one copy on the device


@dataclass(frozen=True)
class ParamTensor:
    """One parameter tensor of the model: its shape and whether it trains (gets a gradient and state)."""

    name: str
    shape: tuple[int, ...]
    trainable: bool = True

    @property
    def numel(self) -> int:
        return prod(self.shape)


def adafactor_bytes(tensor: ParamTensor) -> int:
    """Adafactor's state for one trainable tensor (module docstring)."""
    if len(tensor.shape) >= 2:
        rows = prod(tensor.shape[:-1])
        cols = prod(tensor.shape[:-2]) * tensor.shape[-1]
        return FP32 * (rows + cols + 1)
    return FP32 * (tensor.numel + 1)


def adam8bit_bytes(tensor: ParamTensor) -> int:
    """8-bit Adam's state for one trainable tensor, the shared maps left out (module docstring)."""
    n = tensor.numel
    if n < ADAM8BIT_MIN_SIZE:
        return 2 * FP32 * n
    blocks = -(-n // ADAM8BIT_BLOCK)
    return 2 * n + 2 * FP32 * blocks


def state_bytes(optimizer: str, tensors: list[ParamTensor]) -> int:
    """The optimizer state of every trainable tensor: "adafactor" or "adam8bit" (the latter with its
    shared quantisation maps when any tensor is quantised)."""
    trained = [t for t in tensors if t.trainable]
    if optimizer == "adafactor":
        return sum(adafactor_bytes(t) for t in trained)
    if optimizer == "adam8bit":
        quantised = any(t.numel >= ADAM8BIT_MIN_SIZE for t in trained)
        return sum(adam8bit_bytes(t) for t in trained) + (ADAM8BIT_QMAPS if quantised else 0)
    raise ValueError(f"no shape-dependent state for optimizer {optimizer!r}")


SHAPED = ("adafactor", "adam8bit")  # the optimizers whose state needs the parameter tensors' shapes
HOW = {"adafactor": "transformers' Adafactor (beta1=None): fp32 row + column means of the squared gradient per "
                    "matrix (prod(shape[:-1]) + prod(shape[:-2]) x shape[-1]), the full vector per 1-D tensor, "
                    "and a 0-d fp32 RMS per tensor",
       "adam8bit": "bitsandbytes' Adam8bit: two uint8 moments + an fp32 absmax per 256-element block each "
                   "(tensors of >= 4096 elements; smaller ones two fp32 moments), and the two 1 kB maps once"}

__all__ = ["ADAM8BIT_BLOCK", "ADAM8BIT_MIN_SIZE", "ADAM8BIT_QMAPS", "HOW", "ParamTensor", "SHAPED", "adafactor_bytes",
           "adam8bit_bytes", "state_bytes"]
