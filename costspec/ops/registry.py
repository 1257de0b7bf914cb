"""The op registry: the single source of op names (schema, docs, CLI, tests read it)."""
from __future__ import annotations

from typing import TypeVar

from costspec.ops.opdef import OpDef

OPS: dict[str, OpDef] = {}
D = TypeVar("D", bound=OpDef)


def register_op(cls: type[D]) -> type[D]:
    """Class decorator: instantiate and register an op definition under `cls.name`."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no name")
    if cls.name in OPS:
        raise TypeError(f"op '{cls.name}' registered twice ({type(OPS[cls.name]).__name__}, {cls.__name__})")
    OPS[cls.name] = cls()
    return cls


def spec_ops() -> dict[str, OpDef]:
    """Ops a spec may name (engine-internal ops such as the residual add excluded)."""
    return {name: op for name, op in OPS.items() if op.in_spec}
