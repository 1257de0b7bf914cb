"""Record one run of a torch module: its module calls, the torch functions its own code calls, and
which value flows where.

A `TorchFunctionMode` sees every torch function and tensor method the model's Python code calls
(the outermost call only: what `F.layer_norm` calls inside is not seen), and global forward hooks
keep the stack of module calls. A module whose class `leaf` says it maps as a whole (nn.Linear,
nn.Conv2d, ...) is recorded as one call and nothing inside it is; every other module is a `Scope`
holding its entries in call order: the calls of its submodules (scopes themselves) and the
functions its own code ran.

Every tensor is a `Value` with the kind of what it derives from: `input` (the model input and
everything computed from it: `data`), a parameter (`param`, and values computed from parameters and
no input), or neither (`const`: positions, masks, rotary tables made from shapes and buffers).
Only data values are the dataflow a spec describes; params and consts are operands of the op that
reads them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

DATA, PARAM, CONST = "data", "param", "const"
_RANK = {CONST: 0, PARAM: 1, DATA: 2}


@dataclass(eq=False)
class Value:
    """One tensor of the run (an in-place op makes a new Value of the same tensor)."""

    vid: int
    kind: str  # DATA, PARAM or CONST
    shape: tuple[int, ...]
    dtype: torch.dtype
    producer: "Entry | None" = None  # None: a model input, a parameter or a buffer
    index: int = 0  # which output of its producer
    name: str = ""  # a model input's name, or a parameter's / buffer's path

    def __repr__(self) -> str:
        return f"v{self.vid}{list(self.shape)}"


@dataclass(eq=False)
class Entry:
    """A function call or a submodule call inside a scope, in call order."""

    scope: "Scope | None"  # the scope it ran in (None: the model's own call)
    inputs: list[Value]  # tensor arguments in argument order (data, params and consts)
    outputs: list[Value]
    args: Any = ()  # the call's positional arguments, tensors replaced by their Values
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def data_inputs(self) -> list[Value]:
        seen: list[Value] = []
        for v in self.inputs:
            if v.kind == DATA and v not in seen:
                seen.append(v)
        return seen


@dataclass(eq=False)
class Call(Entry):
    """A function or tensor method (`fn`: its normalized name, e.g. add, linear, view)."""

    fn: str = ""
    func: Any = None
    raw: Any = None  # the call's own arguments (args, kwargs), to name its aten ops when it is unmapped

    @property
    def aten(self) -> tuple[str, ...]:
        """The aten ops the call runs (run again on its arguments under a dispatch mode; not for in-place calls)."""
        if self.raw is None or inplace(self.func):
            return ()
        names = _AtenNames()
        names.names = []
        try:
            with names:
                self.func(*self.raw[0], **self.raw[1])
        except Exception:  # noqa: BLE001 - only a description is at stake
            return ()
        return tuple(dict.fromkeys(names.names))

    def __repr__(self) -> str:
        return f"{self.fn}({', '.join(map(repr, self.inputs))}) -> {self.outputs}"

    @property
    def identity(self) -> bool:
        """It returned its input itself (a cast to the same dtype, `.contiguous()` of a contiguous tensor)."""
        return bool(self.outputs) and all(any(o is v for v in self.inputs) for o in self.outputs)


@dataclass(eq=False)
class Scope(Entry):
    """A module call: `path` in the model, its module, and (unless it is a leaf) what it ran."""

    path: str = ""
    module: Any = None
    leaf: bool = False
    entries: list[Entry] = field(default_factory=list)
    parent: "Scope | None" = None

    @property
    def cls(self) -> str:
        return type(self.module).__name__

    def __repr__(self) -> str:
        return f"<{self.cls} {self.path or '(model)'}>"

    def walk(self):
        """Every entry of this scope and its non-leaf subscopes, in call order."""
        for entry in self.entries:
            yield entry
            if isinstance(entry, Scope) and not entry.leaf:
                yield from entry.walk()


# Tensor methods and torch functions with one normalized name (x + y, torch.add, x.add: add)
_ALIASES = {
    "__add__": "add", "__radd__": "add", "__iadd__": "add", "add_": "add",
    "__mul__": "mul", "__rmul__": "mul", "__imul__": "mul", "mul_": "mul", "multiply": "mul",
    "__sub__": "sub", "__rsub__": "rsub", "__isub__": "sub", "sub_": "sub", "subtract": "sub",
    "__truediv__": "div", "__rtruediv__": "rdiv", "__itruediv__": "div", "div_": "div", "divide": "div",
    "true_divide": "div", "__floordiv__": "floordiv",
    "__matmul__": "matmul", "__rmatmul__": "rmatmul", "mm": "matmul", "bmm": "matmul",
    "__neg__": "neg", "negative": "neg", "__pow__": "pow", "__getitem__": "getitem",
    "relu_": "relu", "sigmoid_": "sigmoid", "tanh_": "tanh", "silu_": "silu", "gelu_": "gelu",
    "concat": "cat", "concatenate": "cat", "__setitem__": "setitem",
}
# functions that return no tensor we follow (sizes, flags) or only describe a tensor
_SKIP = {"size", "dim", "numel", "__len__", "__format__", "__repr__", "__bool__", "__index__", "__int__",
         "__float__", "is_floating_point", "is_contiguous", "stride", "data_ptr", "element_size", "nelement",
         "__get__", "__iter__", "__eq__", "__ne__", "__hash__", "get_device", "is_complex", "tolist", "item",
         "__contains__", "__reversed__", "__array__", "storage_offset", "has_names", "__torch_function__"}


def fn_name(func: Callable) -> str:
    name = getattr(func, "__name__", None) or str(func)
    return _ALIASES.get(name, name)


def inplace(func: Callable) -> bool:
    name = getattr(func, "__name__", "")
    return (name.endswith("_") and not name.endswith("__")) or name.startswith("__i") or name == "__setitem__"


class _AtenNames(TorchDispatchMode):
    """Collects the aten ops run while `names` is a list (one function call of the model's code)."""

    def __init__(self):
        super().__init__()
        self.names: list[str] | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.names is not None:
            self.names.append(str(func._overloadpacket))
        return func(*args, **(kwargs or {}))


class Recorder(TorchFunctionMode):
    """Records a run into a tree of Scopes (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, is_leaf: Callable[[torch.nn.Module], bool]):
        super().__init__()
        self.model = model
        self.is_leaf = is_leaf
        self.paths = {id(m): p for p, m in model.named_modules()}
        self.params = {id(t): n for n, t in model.named_parameters(remove_duplicate=False)}
        self.buffers = {id(t): n for n, t in model.named_buffers(remove_duplicate=False)}
        self.values: dict[int, Value] = {}
        self.keep: list[Any] = []  # every tensor seen, so that no id is reused during the run
        self.root: Scope | None = None
        self.stack: list[Scope] = []
        self.leaf_depth = 0  # > 0 while inside a leaf module
        self.counter = 0
        self.hooks: list[Any] = []

    # -- values ----------------------------------------------------------------------------------
    def new_value(self, t: torch.Tensor, kind: str, producer: Entry | None = None, index: int = 0,
                  name: str = "") -> Value:
        self.counter += 1
        value = Value(self.counter, kind, tuple(int(s) for s in t.shape), t.dtype, producer, index, name)
        self.values[id(t)] = value
        self.keep.append(t)
        return value

    def value_of(self, t: torch.Tensor) -> Value:
        found = self.values.get(id(t))
        if found is not None:
            return found
        if id(t) in self.params:
            return self.new_value(t, PARAM, name=self.params[id(t)])
        if id(t) in self.buffers:
            return self.new_value(t, CONST, name=self.buffers[id(t)])
        return self.new_value(t, CONST, name="(a tensor made outside the model)")

    def add_input(self, t: torch.Tensor, name: str) -> Value:
        return self.new_value(t, DATA, name=name)

    def _refs(self, tree):
        inputs: list[Value] = []

        def ref(x):
            if isinstance(x, torch.Tensor):
                v = self.value_of(x)
                inputs.append(v)
                return v
            return x

        return tree_map(ref, tree), inputs

    def _outputs(self, out, entry: Entry, kind: str, inputs: tuple[Value, ...] | list[Value] = ()) -> list[Value]:
        """New values for the tensors `out` holds; a tensor that is one of the inputs (`x.to(x.dtype)`,
        `x.contiguous()` of a contiguous x returns x itself) stays the value it was."""
        tensors = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        given = {id(v) for v in inputs}
        return [found if (found := self.values.get(id(t))) is not None and id(found) in given
                else self.new_value(t, kind, entry, i) for i, t in enumerate(tensors)]

    # -- functions -------------------------------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.leaf_depth or not self.stack or fn_name(func) in _SKIP:
            return out
        if not any(isinstance(t, torch.Tensor) for t in tree_flatten(out)[0]):
            return out
        ref_args, inputs = self._refs(args)
        ref_kwargs, kw_inputs = self._refs(kwargs)
        inputs += kw_inputs
        kind = max((v.kind for v in inputs), key=_RANK.__getitem__, default=CONST)
        call = Call(self.stack[-1], inputs, [], ref_args, ref_kwargs, fn=fn_name(func), func=func,
                    raw=(args, kwargs))
        if inplace(func) and inputs and isinstance(args[0], torch.Tensor):
            kind = max(kind, inputs[0].kind, key=_RANK.__getitem__)
            call.outputs = [self.new_value(args[0], kind, call)]  # a new version of the same tensor
        else:
            call.outputs = self._outputs(out, call, kind, inputs)
        self.stack[-1].entries.append(call)
        return out

    # -- modules ---------------------------------------------------------------------------------
    def _pre(self, module, args, kwargs):
        if id(module) not in self.paths:
            return None
        if self.leaf_depth:
            self.leaf_depth += 1
            return None
        ref_args, inputs = self._refs(args)
        ref_kwargs, kw_inputs = self._refs(kwargs)
        leaf = self.is_leaf(module)
        scope = Scope(self.stack[-1] if self.stack else None, inputs + kw_inputs, [], ref_args, ref_kwargs,
                      path=self.paths[id(module)], module=module, leaf=leaf,
                      parent=self.stack[-1] if self.stack else None)
        if self.stack:
            self.stack[-1].entries.append(scope)
        else:
            self.root = scope
        self.stack.append(scope)
        if leaf:
            self.leaf_depth = 1
        return None

    def _post(self, module, args, kwargs, out):
        if id(module) not in self.paths:
            return None
        if self.leaf_depth > 1:
            self.leaf_depth -= 1
            return None
        self.leaf_depth = 0
        scope = self.stack.pop()
        kind = max((v.kind for v in scope.inputs), key=_RANK.__getitem__, default=CONST)
        if not scope.leaf:  # a scope's outputs are the values its code produced (or passed through)
            scope.outputs = [self.value_of(t) if id(t) in self.values else self.new_value(t, kind, scope, i)
                             for i, t in enumerate(t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))]
        else:
            scope.outputs = self._outputs(out, scope, kind)
        return None

    def __enter__(self):
        modules = list(self.model.modules())
        self.hooks = [m.register_forward_pre_hook(self._pre, with_kwargs=True) for m in modules]
        self.hooks += [m.register_forward_hook(self._post, with_kwargs=True, always_call=True) for m in modules]
        return super().__enter__()

    def __exit__(self, *exc):
        for hook in self.hooks:
            hook.remove()
        return super().__exit__(*exc)
