"""The real model `validate --against` checks a spec against: load it, build it, make its inputs.

TARGET is `package.module:callable` (the user's code: a callable taking the spec's bound dims as
keyword arguments, or none, returning an nn.Module or `(module, example_inputs)`) or
`hf:ModelClass` (a transformers class built from its default config, a `config.json` file and
`KEY=VALUE` settings). Modules are built on the device the check runs on: on `meta` no weight
is allocated and nothing is downloaded.

torch (and, for hf: targets, transformers) is imported here: import this module only for
`--against`.
"""
from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import sympy
import yaml

from costspec.core.errors import MissingExtraError, UsageError
from costspec.core.expr import evaluator
from costspec.runtime.torch_build import import_torch

if TYPE_CHECKING:
    import torch

    from costspec.tree.network import Network

HF_PREFIX = "hf:"


@dataclass
class Target:
    """A built real model with the inputs it runs on.

    `args` / `kwargs` are what the module is called with; the first tensor of its output (a
    tensor, a tuple, or a transformers ModelOutput: its first field), or the field named by
    `output`, is the output whose `float().sum()` the train pass differentiates, as plain
    `validate` does with the spec's module.
    """

    name: str
    module: "torch.nn.Module"
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    described: list[str] = field(default_factory=list)  # how it was built (config keys set, inputs)
    output: str | None = None  # the output field (or tuple index) that is the spec's output; None: the first


def load_target(target: str, model: "Network", values: Mapping[sympy.Symbol, sympy.Integer], device: str,
                config: str | None = None, config_sets: Mapping[str, str] | None = None,
                output: str | None = None) -> Target:
    """Build TARGET on `device` at the spec's bound dims `values`; `output` names the field of its
    output that the spec's output stands for (`pooler_output`; default the first tensor)."""
    torch = import_torch("costspec validate --against")
    config_sets = dict(config_sets or {})
    if target.startswith(HF_PREFIX):
        built = _hf_target(target[len(HF_PREFIX):], config, config_sets, device)
    else:
        if config is not None or config_sets:
            raise UsageError("--config and --config-set configure hf:ModelClass targets; "
                             f"{target!r} is a callable that builds its own module")
        built = _callable_target(target, {str(k): int(v) for k, v in values.items()}, device)
    module, inputs, described = built
    if not isinstance(module, torch.nn.Module):
        raise UsageError(f"--against {target}: expected an nn.Module, got {type(module).__name__}")
    module.eval()  # dropout is identity, as in the spec; autograd still runs for --pass train
    if inputs is None:
        args: tuple = (spec_input(model, values, device),)
        kwargs: dict[str, Any] = {}
        described.append(f"input: the spec's input {list(args[0].shape)} ({args[0].dtype}) on {device}")
    else:
        args, kwargs = _as_call(inputs, target)
        described.append("input: the example inputs the callable returned")
    if output is not None:
        described.append(f"output: the real model's {output!r}")
    return Target(target, module, args, kwargs, described, output)


def spec_input(model: "Network", values: Mapping[sympy.Symbol, sympy.Integer], device: str) -> "torch.Tensor":
    """The spec's `input:` as a tensor: token ids in range when the first layer reads ids (an
    embedding), float otherwise; random unless on meta."""
    torch = import_torch("costspec validate --against")
    ev = evaluator(values)
    shape = tuple(ev(d) for d in model.in_shape)
    first = next(model.op_nodes(), None)
    dtype = torch.get_default_dtype()
    x = first.op.example_input(first.call, shape, ev, device, dtype) if first is not None else None
    return torch.randn(shape, device=device, dtype=dtype) if x is None else x


def first_tensor(out: Any, output: str | None = None) -> "torch.Tensor":
    """The output the loss is taken of: a tensor, or the first tensor of a tuple / mapping, or its
    field (or tuple index) `output`."""
    torch = import_torch("costspec validate --against")
    if output is not None:
        return _output_field(out, output, torch)
    if isinstance(out, torch.Tensor):
        return out
    items = list(out.values()) if isinstance(out, Mapping) else list(out) if isinstance(out, (tuple, list)) else []
    for item in items:
        if isinstance(item, torch.Tensor):
            return item
    raise UsageError(f"the real model returned {type(out).__name__} with no tensor to take the output of")


def _output_field(out: Any, output: str, torch) -> "torch.Tensor":
    """A transformers output's field (`pooler_output`), a mapping's key, or a tuple's index."""
    if isinstance(out, Mapping):
        found, names = out.get(output), list(out.keys())
    elif isinstance(out, (tuple, list)) and output.isdigit():
        found, names = (out[int(output)] if int(output) < len(out) else None), [str(i) for i in range(len(out))]
    else:
        found, names = None, []
    if not isinstance(found, torch.Tensor):
        fields = f" (its fields: {', '.join(names)})" if names else ""
        raise UsageError(f"--output-field {output}: the real model's output ({type(out).__name__}) has no tensor "
                         f"of that name{fields}")
    return found


# ----------------------------------------------------------------------------------------------
# package.module:callable
# ----------------------------------------------------------------------------------------------
def _callable_target(target: str, dims: dict[str, int], device: str):
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"--against {target!r}: expected package.module:callable or hf:ModelClass")
    if os.getcwd() not in sys.path:  # `costspec` run from a project directory finds the project's modules
        sys.path.insert(0, os.getcwd())
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"--against {target}: cannot import {module_name}: {exc}") from None
    for step in attr.split("."):
        if not hasattr(found, step):
            raise UsageError(f"--against {target}: {module_name} has no attribute {attr!r}")
        found = getattr(found, step)
    if not callable(found):
        raise UsageError(f"--against {target}: {attr} is not callable")
    torch = import_torch("costspec validate --against")
    with torch.device(device):
        made = found(**_dim_kwargs(found, dims, target))
    described = [f"built by {target}(" + ", ".join(f"{k}={v}" for k, v in _dim_kwargs(found, dims, target).items())
                 + f") on {device}"]
    if isinstance(made, tuple) and len(made) == 2:
        return made[0], made[1], described
    return made, None, described


def _dim_kwargs(fn: Callable, dims: dict[str, int], target: str) -> dict[str, int]:
    """The bound dims the callable takes: all of them for **kwargs, else those it names."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return dict(dims)
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    named = {p.name for p in params if p.kind in kinds}
    missing = [p.name for p in params if p.default is inspect.Parameter.empty and p.name not in dims
               and p.kind in kinds]
    if missing:
        raise UsageError(f"--against {target}: the callable needs {', '.join(missing)}, which the spec does not "
                         f"define as dims ({', '.join(dims)})")
    return {k: v for k, v in dims.items() if k in named}


def _as_call(inputs: Any, target: str) -> tuple[tuple, dict[str, Any]]:
    torch = import_torch("costspec validate --against")
    if isinstance(inputs, torch.Tensor):
        return (inputs,), {}
    if isinstance(inputs, Mapping):
        return (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    raise UsageError(f"--against {target}: example inputs must be a tensor, a tuple or a dict, "
                     f"got {type(inputs).__name__}")


# ----------------------------------------------------------------------------------------------
# hf:ModelClass
# ----------------------------------------------------------------------------------------------
def _hf_target(class_name: str, config_file: str | None, sets: dict[str, str], device: str):
    try:
        import transformers
    except ImportError:
        raise MissingExtraError("transformers", "hf", "costspec validate --against hf:...") from None
    cls: Any = getattr(transformers, class_name, None) or _model_module_class(class_name)
    if not (inspect.isclass(cls) and getattr(cls, "config_class", None) is not None):
        raise UsageError(f"--against hf:{class_name}: transformers {transformers.__version__} has no model class "
                         f"{class_name!r}")
    model_cls: Any = cls  # a class now (mypy narrows it to type[object])
    config_cls: Any = model_cls.config_class
    described = [f"transformers {transformers.__version__} {class_name} on {device}, no weights"]
    defaults = config_cls()
    data = _read_config(config_file) if config_file is not None else {}
    data = _tower_config(data, config_cls, described)
    described.append(f"config: {config_file}" if config_file is not None
                     else f"config: {config_cls.__name__}() defaults")
    ctor = _constructor_params(cls)
    kwargs: dict[str, Any] = {}
    for key, raw in sets.items():
        value = _value(raw)
        if key in ctor and not hasattr(defaults, key):  # a constructor argument (ViTModel's add_pooling_layer)
            kwargs[key] = value
            described.append(f"{class_name}(..., {key}={value!r})")
        elif hasattr(defaults, key):
            data[key] = value
            described.append(f"config {key}={value!r}")
        else:
            raise UsageError(f"--config-set {key}: {config_cls.__name__} has no key {key!r} and {class_name}() no "
                             f"argument of that name" + (f" (arguments: {', '.join(sorted(ctor))})" if ctor else ""))
    # built from the keys (not set afterwards): derived keys such as head_dim follow hidden_size
    config = config_cls(**data)
    torch = import_torch("costspec validate --against")
    with torch.device(device):
        module = model_cls(config, **kwargs)
    return module, None, described


def _model_module_class(class_name: str) -> Any:
    """A class transformers does not export at its top level (WhisperEncoder): looked up in the modeling
    module of the model type its name starts with (whisper -> transformers.models.whisper.modeling_whisper)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    lowered = class_name.lower()
    types = sorted((t for t in CONFIG_MAPPING_NAMES if lowered.startswith(t.replace("_", "").replace("-", ""))),
                   key=len, reverse=True)
    for model_type in types:
        module_name = model_type.replace("-", "_")
        try:
            module = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
        except ImportError:
            continue
        if inspect.isclass(getattr(module, class_name, None)):
            return getattr(module, class_name)
    return None


def _tower_config(data: dict, config_cls: Any, described: list[str]) -> dict:
    """A composite config (CLIP's, SAM's: `model_type` clip, with a `vision_config`) given for a tower
    class (CLIPVisionModelWithProjection): the nested config of the tower's model_type, with the
    composite's own keys that the tower's config class also has (CLIP's top-level projection_dim,
    which CLIPModel's visual_projection uses). Any other config: as it is."""
    wanted = getattr(config_cls, "model_type", None)
    if not wanted or data.get("model_type") in (None, wanted):
        return data
    for key, value in data.items():
        if isinstance(value, dict) and value.get("model_type") == wanted:
            defaults = config_cls()
            shared = {k: v for k, v in data.items() if not isinstance(v, dict) and hasattr(defaults, k)
                      and k not in ("model_type", "architectures", "transformers_version", "_name_or_path")}
            described.append(f"config: {key} of the {data['model_type']} config"
                             + (f" with its {', '.join(sorted(shared))}" if shared else ""))
            return {**value, **shared}
    return data


def _constructor_params(cls) -> set[str]:
    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return set()
    return {n for n, p in params.items() if n not in ("self", "config")
            and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}


def _read_config(path: str) -> dict:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--config {path}: cannot read it: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--config {path}:{exc.lineno}: not JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise UsageError(f"--config {path}: expected a JSON object (a Hugging Face config.json)")
    return data


def _value(raw: str) -> Any:
    """A --config-set value as YAML reads it: 12 -> int, 1e-6 -> float, false -> bool, [2, 5] -> list."""
    try:
        value = yaml.safe_load(raw) if raw.strip() else raw
    except yaml.YAMLError:
        return raw
    if isinstance(value, str):  # PyYAML reads 1e-6 (no dot) as a string
        try:
            return float(value)
        except ValueError:
            return value
    return value
