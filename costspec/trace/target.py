"""What `costspec import torch` imports, built at any sizes: a callable of the user's
(`package.module:callable`), a transformers class (`hf:ModelClass` with a config), or a module
object with its example inputs (the Python API).

`Target.build(dims)` returns the module (on `meta`: no weights, no data) and the inputs it runs on,
at the given values of the dims. Dims are of two kinds: the callable's own integer keyword
arguments (or a transformers config's size keys, under the short names of `HF_DIMS`), which
rebuild the model, and input axes (`--dim S=ids:1`; axis 0 of every input is `B`), which resize
the inputs when the callable does not take them.
"""
from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from costspec.core.errors import MissingExtraError, UsageError

HF_PREFIX = "hf:"
# config keys that become dims of an imported transformers model (short names, as `import hf` writes them)
HF_DIMS = {"hidden_size": "C", "intermediate_size": "F", "num_attention_heads": "heads",
           "num_key_value_heads": "KV", "head_dim": "D", "num_hidden_layers": "L", "vocab_size": "V"}
HF_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
DEFAULT_S = 4096  # a text model's sequence length when its config names no max_position_embeddings


@dataclass(frozen=True)
class Axis:
    """A dim naming axis `axis` of input `input` (`--dim S=input_ids:1`)."""

    input: str
    axis: int


@dataclass
class Built:
    """A model at some sizes, with the inputs it is called with (names in order)."""

    module: torch.nn.Module
    inputs: dict[str, torch.Tensor]
    positional: bool  # call as module(*inputs.values()) (else module(**inputs))


@dataclass
class Target:
    """Builds the model at given dims. `model_dims`: the model's own size arguments and their base
    values; `axes`: input dims and the axes they name; `described`: how it is built."""

    name: str
    make: Callable[[dict[str, int]], tuple[torch.nn.Module, Any]]
    model_dims: dict[str, int]
    axes: dict[str, list[Axis]] = field(default_factory=dict)
    dtype: str | None = None  # the spec's precision when the target says it (a config's dtype)
    check: str = ""  # the TARGET of the `validate --against` command that checks the spec
    check_options: list[str] = field(default_factory=list)
    doc: str = ""
    key_of: dict[str, str] = field(default_factory=dict)  # dim -> the config key it stands for

    def build(self, dims: dict[str, int]) -> Built:
        """The model and its inputs at `dims` (the dims not given at their base values)."""
        module, made = self.make(dims)
        if not isinstance(module, torch.nn.Module):
            raise UsageError(f"{self.name}: expected an nn.Module, got {type(module).__name__}")
        inputs, positional = named_inputs(module, made, self.name)
        for dim, axes in self.axes.items():
            if dim not in dims:
                continue
            for axis in axes:
                if axis.input not in inputs:
                    raise UsageError(f"--dim {dim}={axis.input}:{axis.axis}: the model's inputs are "
                                     f"{', '.join(inputs)}")
                inputs[axis.input] = resized(inputs[axis.input], axis.axis, dims[dim], dim)
        return Built(module.eval(), inputs, positional)


def named_inputs(module: torch.nn.Module, made: Any, name: str) -> tuple[dict[str, torch.Tensor], bool]:
    """Example inputs as {name: tensor}: a dict as it is, a tensor or tuple named after forward's arguments."""
    if made is None:
        raise UsageError(f"{name}: the callable returned a module alone; return (module, example_inputs) so that "
                         "the import knows what the model runs on (a tensor, a tuple or a dict of tensors)")
    if isinstance(made, dict):
        if not all(isinstance(v, torch.Tensor) for v in made.values()):
            raise UsageError(f"{name}: example inputs must be tensors")
        return dict(made), False
    items = (made,) if isinstance(made, torch.Tensor) else tuple(made) if isinstance(made, (tuple, list)) else None
    if items is None or not items or not all(isinstance(t, torch.Tensor) for t in items):
        raise UsageError(f"{name}: example inputs must be a tensor, a tuple of tensors or a dict of tensors, got "
                         f"{type(made).__name__}")
    try:
        params = [p for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params[:len(items)]]
    names += [f"x{i}" for i in range(len(names), len(items))]
    return dict(zip(names, items)), True


def resized(t: torch.Tensor, axis: int, size: int, dim: str) -> torch.Tensor:
    """`t` with axis `axis` of length `size` (a new tensor on meta: only its shape matters)."""
    if not -t.dim() <= axis < t.dim():
        raise UsageError(f"--dim {dim}: axis {axis} of an input of shape {list(t.shape)}")
    if t.shape[axis] == size:
        return t
    shape = list(t.shape)
    shape[axis] = size
    return torch.zeros(shape, dtype=t.dtype, device=t.device)


def parse_dims(specs: list[str] | tuple[str, ...]) -> dict[str, list[Axis]]:
    """`--dim NAME=INPUT:AXIS[,AXIS...]` options -> {NAME: [Axis, ...]}."""
    out: dict[str, list[Axis]] = {}
    for item in specs:
        name, sep, rest = item.partition("=")
        where, colon, axes = rest.rpartition(":")
        if not sep or not colon or not name.isidentifier() or not where:
            raise UsageError(f"--dim {item!r}: expected NAME=INPUT:AXIS (e.g. S=input_ids:1)")
        try:
            numbers = [int(a) for a in axes.split(",")]
        except ValueError:
            raise UsageError(f"--dim {item!r}: the axis must be an integer (or integers separated by commas)") from None
        out.setdefault(name, []).extend(Axis(where, a) for a in numbers)
    return out


def default_axes(inputs: dict[str, torch.Tensor], named: dict[str, list[Axis]]) -> dict[str, list[Axis]]:
    """The named axes plus B = axis 0 of every input that no --dim names."""
    taken = {(a.input, a.axis % inputs[a.input].dim()) for axes in named.values() for a in axes
             if a.input in inputs}
    out = dict(named)
    batch = [Axis(n, 0) for n, t in inputs.items() if t.dim() and (n, 0) not in taken]
    if batch and "B" not in out:
        out["B"] = batch
    return out


# ----------------------------------------------------------------------------------------------
# package.module:callable
# ----------------------------------------------------------------------------------------------
def callable_target(target: str) -> Target:
    """The user's callable: its int keyword arguments with int defaults are the model's dims."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"{target!r}: expected package.module:callable or hf:ModelClass")
    if os.getcwd() not in sys.path:  # run from a project directory, the project's modules are found
        sys.path.insert(0, os.getcwd())
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"{target}: cannot import {module_name}: {exc}") from None
    for step in attr.split("."):
        if not hasattr(found, step):
            raise UsageError(f"{target}: {module_name} has no attribute {attr!r}")
        found = getattr(found, step)
    if not callable(found):
        raise UsageError(f"{target}: {attr} is not callable")
    fn = found
    dims = size_arguments(fn)

    def make(values: dict[str, int]):
        with torch.device("meta"):
            made = fn(**{k: v for k, v in values.items() if k in dims})
        return (made[0], made[1]) if isinstance(made, tuple) and len(made) == 2 and \
            isinstance(made[0], torch.nn.Module) else (made, None)

    doc = (inspect.getdoc(fn) or "").split("\n\n")[0].replace("\n", " ")
    return Target(target, make, dims, check=target, doc=doc)


def size_arguments(fn: Callable) -> dict[str, int]:
    """The keyword arguments of `fn` with a positive int default (bools excluded)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {p.name: p.default for p in params
            if isinstance(p.default, int) and not isinstance(p.default, bool) and p.default > 0
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name.isidentifier()}


def module_target(module: torch.nn.Module, inputs: Any, name: str) -> Target:
    """A module object and its example inputs (the Python API): only input axes can be dims."""
    return Target(name, lambda values: (module, inputs), {}, check="", doc="")


# ----------------------------------------------------------------------------------------------
# hf:ModelClass
# ----------------------------------------------------------------------------------------------
def hf_target(class_name: str, config_file: str | None, sets: dict[str, Any]) -> Target:
    """A transformers class built from its config (defaults, a config.json, KEY=VALUE settings)."""
    try:
        import transformers
    except ImportError:
        raise MissingExtraError("transformers", "hf", "costspec import torch hf:...") from None
    found: Any = getattr(transformers, class_name, None)
    if not (inspect.isclass(found) and getattr(found, "config_class", None) is not None):
        raise UsageError(f"hf:{class_name}: transformers {transformers.__version__} has no model class {class_name!r}")
    cls: Any = found
    config_cls: Any = cls.config_class
    data = _read_config(config_file) if config_file else {}
    defaults = config_cls()
    ctor: dict[str, Any] = {}
    for key, raw in sets.items():
        value = setting(raw)
        if hasattr(defaults, key):
            data[key] = value
        elif key in inspect.signature(cls.__init__).parameters:
            ctor[key] = value
        else:
            raise UsageError(f"--config-set {key}: {config_cls.__name__} has no key {key!r} and {class_name}() no "
                             "argument of that name")
    full = config_cls(**data)
    dims = {short: int(getattr(full, key)) for key, short in HF_DIMS.items()
            if isinstance(getattr(full, key, None), int) and not isinstance(getattr(full, key), bool)
            and getattr(full, key) > 0 and (key != "head_dim" or key in data)}
    key_of = {short: key for key, short in HF_DIMS.items() if short in dims}
    main = getattr(cls, "main_input_name", "input_ids")
    text = main == "input_ids"
    base_s = int(getattr(full, "max_position_embeddings", None) or DEFAULT_S) if text else 0
    image = int(getattr(full, "image_size", 224) or 224) if not text else 0
    if isinstance(getattr(full, "image_size", None), (list, tuple)):
        image = int(full.image_size[0])
    channels = int(getattr(full, "num_channels", 3) or 3)

    def make(values: dict[str, int]):
        config = config_cls(**{**data, **{key_of[d]: v for d, v in values.items() if d in key_of}})
        with torch.device("meta"):
            module = cls(config, **ctor)
        batch = values.get("B", 1)
        if text:
            inputs = {main: torch.zeros(batch, values.get("S", base_s), dtype=torch.long, device="meta")}
        else:
            inputs = {main: torch.zeros(batch, channels, image, image, device="meta")}
        return module, inputs

    dtype = data.get("dtype") or data.get("torch_dtype")
    options = ([f"--config {config_file}"] if config_file else []) + \
        [f"--config-set {k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in sets.items()]
    axes = {"S": [Axis(main, 1)]} if text else {}
    base = {**dims, "B": 1, **({"S": base_s} if text else {})}
    return Target(f"hf:{class_name}", make, base, axes=axes, dtype=HF_DTYPES.get(str(dtype)) if dtype else None,
                  check=f"hf:{class_name}", check_options=options, doc=f"transformers {class_name}", key_of=key_of)


def setting(raw: Any) -> Any:
    """A --config-set value as YAML reads it (12 -> int, false -> bool, [2, 5] -> list, 1e-6 -> float)."""
    if not isinstance(raw, str):
        return raw
    import yaml

    try:
        value = yaml.safe_load(raw) if raw.strip() else raw
    except yaml.YAMLError:
        return raw
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _read_config(path: str) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"--config {path}: cannot read it: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--config {path}:{exc.lineno}: not JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise UsageError(f"--config {path}: expected a JSON object (a Hugging Face config.json)")
    return data
