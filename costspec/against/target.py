"""The real model `validate --against` checks a spec against: load it, build it, make its inputs.

TARGET is `package.module:callable` (the user's code: a callable taking the spec's bound dims as
keyword arguments, or none, returning an nn.Module or `(module, example_inputs)`) or
`hf:ModelClass` (a transformers class built from its default config, a `config.json` file and
`KEY=VALUE` settings). Modules are built on the device the check runs on: on `meta` no weight
is allocated and nothing is downloaded.

The user's code runs guarded (`user_code`): an exception it raises while its module is imported,
built, put in eval mode or run forward is the user's error (a UserCodeError, exit 2, naming the
target, the exception's type and message, and where it was raised), and so is any SystemExit it
raises (`raise SystemExit(0)`, the target `builtins:exit`): no exit from user code ends a run
without a comparison. A model built from a config (hf:) is budgeted before it is built on the
device (`check_real_budget`): its layer count from the config, then, built on meta, its modules
and parameters, and on cpu the memory its weights need (`--force` overrides).

torch (and, for hf: targets, transformers) is imported here: import this module only for
`--against`.
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import re
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

import sympy
import yaml

from costspec.against.meta_checks import forward_with, skip_meta_value_checks
from costspec.core.errors import CostspecError, MissingExtraError, UsageError
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


class UserCodeError(UsageError):
    """The user's code (or a model built from the user's config) raised, or tried to end the run."""


def _where_raised(exc: BaseException) -> str:
    """`file:line` of the innermost frame of `exc` outside torch (where the user's code raised it)."""
    frames = traceback.extract_tb(exc.__traceback__)
    outside = [f for f in frames if f"{os.sep}torch{os.sep}" not in f.filename and f.filename != __file__]
    chosen = outside or list(frames)
    return f" (at {chosen[-1].filename}:{chosen[-1].lineno})" if chosen else ""


@contextlib.contextmanager
def user_code(target: str, what: str) -> Iterator[None]:
    """Run the user's code: its exceptions and any SystemExit become a UserCodeError naming `target`;
    costspec's own errors and KeyboardInterrupt pass through (COSTSPEC_DEBUG: the original error)."""
    try:
        yield
    except CostspecError:
        raise
    except SystemExit as exc:
        raise UserCodeError(f"--against {target}: {what} raised SystemExit({exc.code!r}){_where_raised(exc)}: code "
                            "that a validation runs may not end it (nothing was compared)") from None
    except Exception as exc:
        if os.environ.get("COSTSPEC_DEBUG"):
            raise
        message = " ".join(str(exc).split())
        message = message if len(message) <= 400 else message[:400] + " ..."
        raise UserCodeError(f"--against {target}: {what} raised {type(exc).__name__}: {message}"
                            f"{_where_raised(exc)}") from None


@contextlib.contextmanager
def no_exit(target: str) -> Iterator[None]:
    """Around everything `validate --against` runs: a SystemExit from the user's code wherever it is
    raised (a custom autograd backward, a hook) is an error, never the end of the run."""
    try:
        yield
    except SystemExit as exc:
        raise UserCodeError(f"--against {target}: the real model raised SystemExit({exc.code!r}){_where_raised(exc)} "
                            "while it was run: code that a validation runs may not end it (nothing was "
                            "compared)") from None


def _guard_forward(module: "torch.nn.Module", target: str) -> None:
    """Run the module's forward under `user_code` (its exceptions are the user's, with their type)."""
    forward = module.forward

    def guarded(*args: Any, **kwargs: Any) -> Any:
        with user_code(target, "the real model's forward"):
            return forward(*args, **kwargs)

    object.__setattr__(module, "forward", guarded)


META_MASK_NOTE = ("the padding mask the model builds itself from torch.ones is taken as all ones, which meta tensors "
                  "cannot tell transformers' sdpa mask (fast_all); no mask is passed, so it is (on --device cpu the "
                  "test runs)")


def _meta_padding_masks(module: "torch.nn.Module", described: list[str]) -> None:
    """On meta, transformers' causal-mask shortcut asks whether a padding mask is all ones (`fast_all`: a value
    meta tensors do not hold). validate --against passes no mask, so the only padding masks are those a model
    builds itself from torch.ones (BART's decoder): taken as all ones during the forward, and said so."""
    try:
        from transformers import masking_utils
    except ImportError:
        return
    original = getattr(masking_utils, "fast_all", None)
    if original is None:
        return

    def all_ones(tensor: Any) -> Any:
        if not tensor.is_meta:
            return original(tensor)
        if META_MASK_NOTE not in described:
            described.append(META_MASK_NOTE)
        return True

    forward_with(module, masking_utils, "fast_all", all_ones)


def load_target(target: str, model: "Network", values: Mapping[sympy.Symbol, sympy.Integer], device: str,
                config: str | None = None, config_sets: Mapping[str, str] | None = None,
                output: str | None = None, force: bool = False) -> Target:
    """Build TARGET on `device` at the spec's bound dims `values`; `output` names the field of its
    output that the spec's output stands for (`pooler_output`; default the first tensor). `force`: build
    a model from a config beyond the budget (`check_real_budget`)."""
    config_sets = dict(config_sets or {})
    if target.startswith(HF_PREFIX):  # the config's layers are counted before torch is imported
        given = _read_config(config) if config is not None else {}
        check_layer_budget(target, config_layers({**given, **{k: _value(v) for k, v in config_sets.items()}}), force)
    torch = import_torch("costspec validate --against")
    if target.startswith(HF_PREFIX):
        built = _hf_target(target[len(HF_PREFIX):], config, config_sets, device, force)
    else:
        if config is not None or config_sets:
            raise UsageError("--config and --config-set configure hf:ModelClass targets; "
                             f"{target!r} is a callable that builds its own module")
        built = _callable_target(target, {str(k): int(v) for k, v in values.items()}, device)
    module, inputs, described = built
    if not isinstance(module, torch.nn.Module):
        raise UserCodeError(f"--against {target}: expected an nn.Module (or (module, example inputs)), got "
                            f"{type(module).__name__}")
    with user_code(target, "the real model's eval()"):
        module.eval()  # dropout is identity, as in the spec; autograd still runs for --pass train
    if target.startswith(HF_PREFIX) and (every := checkpoint_every(model)):
        with user_code(target, "the real model's activation_checkpointing_enable()"):
            described.append(enable_checkpointing(module, every))
    _guard_forward(module, target)
    if target.startswith(HF_PREFIX) and device == "meta":
        _meta_padding_masks(module, described)
        skip_meta_value_checks(module, described)
    if inputs is None:
        args: tuple = (spec_input(model, values, device),)
        kwargs: dict[str, Any] = further_inputs(model, values, device) if target.startswith(HF_PREFIX) else {}
        described.append(f"input: the spec's input {list(args[0].shape)} ({args[0].dtype}) on {device}")
        described.extend(f"input {name}=: the spec's input {name} {list(x.shape)} ({x.dtype}) on {device}"
                         for name, x in kwargs.items())
    else:
        args, kwargs = _as_call(inputs, target)
        described.append("input: the example inputs the callable returned")
    if output is not None:
        described.append(f"output: the real model's {output!r}")
    return Target(target, module, args, kwargs, described, output)


def checkpoint_every(model: "Network") -> int:
    """N when the spec checkpoints every N-th instance of its repeats (1: each), 0 when it checkpoints none."""
    from costspec.tree.nodes import RepeatNode

    found = {n.checkpoint_every for n in _nodes(model.root) if isinstance(n, RepeatNode) and n.checkpoint}
    if len(found) > 1:
        raise UsageError("--against hf:...: the spec's repeats are checkpointed at different intervals "
                         f"({', '.join(f'every {n}' for n in sorted(found))}); transformers takes one for all layers")
    return found.pop() if found else 0


def _nodes(node) -> Iterator:
    yield node
    for child in node.children:
        yield from _nodes(child)


def enable_checkpointing(module: "torch.nn.Module", every: int) -> str:
    """Turn on transformers' activation checkpointing of every `every`-th layer (non-reentrant), as the spec's
    `checkpoint:` has it; its layers checkpoint only in training mode, so the checkpointed layers (and not their
    children: dropout stays off) are marked training. Returns the line saying so."""
    enable = (getattr(module, "activation_checkpointing_enable", None)
              or getattr(module, "gradient_checkpointing_enable", None))
    if enable is None or not getattr(module, "supports_gradient_checkpointing", False):
        raise UsageError(f"{type(module).__name__} has no activation checkpointing in transformers, and the spec "
                         "checkpoints its repeats (drop `checkpoint:` / --checkpoint to compare it)")
    kwargs: dict[str, Any] = {"every_n_layers": every} if every > 1 else {}
    if every > 1 and "every_n_layers" not in inspect.signature(enable).parameters:
        raise UsageError(f"checkpointing every {every}-th layer needs transformers' every_n_layers (transformers 5)")
    enable({"use_reentrant": False}, **kwargs)
    from transformers.modeling_layers import GradientCheckpointingLayer

    # only the layers: the model itself in training mode would drop its cache (and find packed sequences)
    layers = [m for m in module.modules() if isinstance(m, GradientCheckpointingLayer) and m.gradient_checkpointing]
    for layer in layers:
        layer.training = True
    return (f"activation checkpointing: transformers' {enable.__name__}(use_reentrant=False"
            + (f", every_n_layers={every}" if every > 1 else "") + f") on {len(layers)} modules, run with "
            "PyTorch's checkpoint early stop off (each checkpointed layer's whole forward re-run, as costspec "
            "counts it)")


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


def further_inputs(model: "Network", values: Mapping[sympy.Symbol, sympy.Integer], device: str) -> dict[str, Any]:
    """The spec's further inputs (`inputs:`) as tensors, by name: an hf: model gets them as keyword arguments
    of the same name (an encoder-decoder's `decoder_input_ids`); token ids in range where an embedding reads one."""
    torch = import_torch("costspec validate --against")
    ev = evaluator(values)
    out = {}
    for name, ref in model.root.inputs.items():
        shape = tuple(ev(d) for d in ref.shape)
        reader = next((n for n in model.op_nodes() if n.input_from is ref), None)
        dtype = torch.get_default_dtype()
        x = reader.op.example_input(reader.call, shape, ev, device, dtype) if reader is not None else None
        out[name] = torch.randn(shape, device=device, dtype=dtype) if x is None else x
    return out


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
    torch = import_torch("costspec validate --against")
    with user_code(target, f"importing {module_name}"):
        try:
            found: Any = importlib.import_module(module_name)
        except ImportError as exc:
            raise UsageError(f"--against {target}: cannot import {module_name}: {exc}") from None
    with user_code(target, f"looking up {attr} in {module_name}"):
        for step in attr.split("."):
            if not hasattr(found, step):
                raise UsageError(f"--against {target}: {module_name} has no attribute {attr!r}")
            found = getattr(found, step)
    if not callable(found):
        raise UsageError(f"--against {target}: {attr} is not callable")
    kwargs = _dim_kwargs(found, dims, target)
    with user_code(target, f"calling {attr}()"), torch.device(device):
        made = found(**kwargs)
    described = [f"built by {target}(" + ", ".join(f"{k}={v}" for k, v in kwargs.items()) + f") on {device}"]
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
def _hf_target(class_name: str, config_file: str | None, sets: dict[str, str], device: str, force: bool = False):
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
    target = f"hf:{class_name}"
    layers = config_layers(data)
    check_layer_budget(target, layers, force)
    # built from the keys (not set afterwards): derived keys such as head_dim follow hidden_size
    with user_code(target, f"{config_cls.__name__}(...) from the config"):
        config = config_cls(**data)
    torch = import_torch("costspec validate --against")
    with user_code(target, f"building {class_name} from its config"):
        with torch.device("meta"):  # the budget first: modules and parameters, nothing allocated
            module = model_cls(config, **kwargs)
        described.append(check_real_budget(target, module, layers, device, force))
        if device != "meta":
            with torch.device(device):
                module = model_cls(config, **kwargs)
        else:
            described.extend(_static_rope(module))
    return module, None, described


RUN_TIME_ROPE = ("dynamic", "longrope")


def _static_rope(module: Any) -> list[str]:
    """Dynamic and LongRoPE rotary embeddings, on meta, run with the frequencies they were built with.

    transformers updates their inverse frequencies in the forward from max(position_ids) + 1 with a Python
    branch (`if seq_len > max_seq_len_cached`), which needs a value meta tensors do not hold. The frequencies
    are constants of the cos / sin tables: which ones are used changes no FLOP the spec counts (the update's
    max over the position ids and its recomputed tables, done once per forward, are not in the spec)."""
    kinds = set()
    for sub in module.modules():
        rope_type = getattr(sub, "rope_type", None)
        if isinstance(rope_type, str) and rope_type.startswith(RUN_TIME_ROPE):
            kinds.add(rope_type)
            sub.rope_type = "default"
        elif isinstance(rope_type, dict) and any(isinstance(v, str) and v.startswith(RUN_TIME_ROPE)
                                                 for v in rope_type.values()):
            kinds.update(v for v in rope_type.values() if v.startswith(RUN_TIME_ROPE))
            sub.rope_type = {k: "default" if isinstance(v, str) and v.startswith(RUN_TIME_ROPE) else v
                             for k, v in rope_type.items()}
    if not kinds:
        return []
    return [f"RoPE {'/'.join(sorted(kinds))}: its frequencies are updated from max(position_ids) at run time, "
            "which meta tensors cannot give; run with the frequencies it was built with (the same FLOPs: RoPE's "
            "type changes constants only; on --device cpu the update runs)"]


# ----------------------------------------------------------------------------------------------
# the budget of a model built from a config
# ----------------------------------------------------------------------------------------------
_LAYER_KEYS = re.compile(r"(?:num_)?(?:hidden_|encoder_|decoder_)?layers|n_layers?|num_blocks|depths?")


def config_layers(data: Mapping[str, Any]) -> int:
    """The layers a config asks for: every layer-count key (num_hidden_layers, n_layer, encoder_layers,
    depths, ...) summed, in nested configs too; a non-integer value counts 0 (the config class judges it)."""
    total = 0
    for key, value in data.items():
        if isinstance(value, Mapping):
            total += config_layers(value)
        elif isinstance(key, str) and _LAYER_KEYS.fullmatch(key):
            items = value if isinstance(value, list) else [value]
            total += sum(v for v in items if isinstance(v, int) and not isinstance(v, bool) and v > 0)
    return total


def check_layer_budget(target: str, layers: int, force: bool) -> None:
    """Refuse a config asking for more layers than MAX_REAL_LAYERS before anything is built."""
    from costspec.core.budget import MAX_REAL_LAYERS

    if layers > MAX_REAL_LAYERS and not force:
        raise UsageError(f"--against {target}: the config asks for {layers:,} layers (its layer-count keys summed); "
                         f"the limit for a model built from a config is {MAX_REAL_LAYERS:,}: check the config, or "
                         "--force to build it anyway")


def check_real_budget(target: str, meta_module: "torch.nn.Module", layers: int, device: str, force: bool) -> str:
    """The modules and parameters of the model built on meta, against the limits (MAX_TORCH_MODULES, and on
    cpu the memory its fp32 weights need against what is available); a line for the report."""
    from costspec.core.budget import MAX_TORCH_MODULES
    from costspec.runtime.torch_budget import CPU_BYTES_PER_ELEMENT, available_memory

    modules = sum(1 for _ in meta_module.modules())
    params = sum(p.numel() for p in meta_module.parameters())
    if modules > MAX_TORCH_MODULES and not force:
        raise UsageError(f"--against {target}: the model built from the config has {modules:,} modules; the limit is "
                         f"{MAX_TORCH_MODULES:,} (as for a spec's torch module): check the config, or --force")
    need = params * CPU_BYTES_PER_ELEMENT
    have = available_memory() if device != "meta" else None
    if have is not None and need > have and not force:
        raise UsageError(f"--against {target}: the model built from the config has {params:,} parameters, about "
                         f"{need / 2**30:,.1f} GiB of fp32 weights on {device}, more than the {have / 2**30:,.1f} GiB "
                         "available; use --device meta (nothing allocated), a smaller config, or --force")
    return (f"budget: {layers:,} layers in the config, {modules:,} modules, {params:,} parameters"
            + (f" ({need / 2**30:,.2f} GiB of fp32 weights on {device})" if device != "meta" else ""))


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
    """A config.json through the bounded reader (`costspec.core.safeio`: a regular file of at most 4 MB,
    nesting and numbers bounded; a FIFO or /dev/zero is an error at once)."""
    from costspec.core.safeio import HF_CONFIG, InputError, read_json

    try:
        data = read_json(path, HF_CONFIG)
    except InputError as exc:
        raise UsageError(f"--config: {exc}") from None
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
