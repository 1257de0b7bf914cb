"""`costspec import torch`: a spec from the user's own torch module, traced on `meta`.

The model runs once under a recorder (`record`: module calls, the torch functions its code calls,
which value flows where); what ran is compiled into layers (`graph`: chains, residuals, parallel
joins; `leaf`, `functions` and `patterns` map modules and calls to ops of the registry), identical
consecutive children become repeats (`repeats`), the model runs again at other sizes so that every
size becomes an expression of the dims (`fit`), module classes become blocks (`blocks`), and the
text is written (`write`, `spec`). What cannot be mapped is listed (module path, function, aten
ops), never dropped.

torch is imported by this package: only `costspec import torch` and the Python API below import it
(the analytic path and `import hf` never do).
"""
from __future__ import annotations

from typing import Any, Callable

from costspec.trace.spec import Imported, spec_text
from costspec.trace.target import Target, callable_target, hf_target, module_target, parse_dims


def import_target(target: Target, dims: list[str] | tuple[str, ...] = (), output_field: str | None = None,
                  dtype: str | None = None, spec_name: str = "SPEC.yaml",
                  progress: Callable[[str], None] = lambda text: None) -> Imported:
    """Trace `target` at its base sizes and at the others the fit needs; the spec text and what is unmapped."""
    from costspec.trace.run import runs

    fitted = runs(target, parse_dims(dims), output_field, progress)
    return spec_text(target, fitted, dtype, output_field, spec_name)


def import_torch(source: str, dims: list[str] | tuple[str, ...] = (), config: str | None = None,
                 config_sets: dict[str, Any] | None = None, output_field: str | None = None,
                 dtype: str | None = None, spec_name: str = "SPEC.yaml",
                 progress: Callable[[str], None] = lambda text: None) -> Imported:
    """The spec of SOURCE: `package.module:callable` or `hf:ModelClass` (with `config`, `config_sets`)."""
    if source.startswith("hf:"):
        target = hf_target(source[3:], config, dict(config_sets or {}))
    else:
        target = callable_target(source)
    return import_target(target, dims, output_field, dtype, spec_name, progress)


def import_module(module: Any, inputs: Any, dims: list[str] | tuple[str, ...] = (), name: str = "module",
                  output_field: str | None = None, dtype: str | None = None) -> Imported:
    """The spec of a module object called on `inputs` (a tensor, a tuple or a dict of tensors). Only input
    axes can be dims here (`dims` as on the command line, `S=input_ids:1`; axis 0 of every input is B);
    the model's own sizes are numbers (import a callable that builds it to make them dims)."""
    return import_target(module_target(module, inputs, name), dims, output_field, dtype)


__all__ = ["Imported", "import_module", "import_target", "import_torch"]
