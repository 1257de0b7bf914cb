"""`costspec init NAME`: a commented starter spec that evaluates as written, with the editor-schema line.

The first line, `# yaml-language-server: $schema=...`, makes VS Code (Red Hat YAML extension),
Neovim / Helix (yaml-language-server) and JetBrains IDEs complete keys and op attributes and flag
errors as you type; it points at the schema shipped with costspec (relative to the new file).
"""
from __future__ import annotations

import os
import re
from importlib import resources
from pathlib import Path

from costspec.core.errors import UsageError
from costspec.core.text import for_terminal

SCHEMA_LINE = "# yaml-language-server: $schema={schema}"

_TEMPLATE = """{schema_line}
# A costspec model spec. Evaluate it with:   costspec eval {file} --batch 8
# Closed forms:   costspec formula {file}      HTML report:   costspec report {file} -o report.html
# Reference: docs/spec-language.md (keys), docs/ops.md (every op and its attributes).
costspec: 1                      # format version
name: {name}
doc: A small pre-LN transformer encoder (edit me)

# Dims are named sizes; each is a symbol in the formulas. A number is a free dim (its default
# value; override with --set NAME=VALUE or --batch for B); a string is a derived dim.
dims:
  B: {{value: 1, doc: batch size}}
  S: {{value: 256, doc: sequence length (tokens)}}
  C: {{value: 512, doc: model width}}
  heads: {{value: 8, doc: attention heads}}
  L: {{value: 6, doc: depth (blocks)}}

precision: {{dtype: bf16}}         # fp32 | tf32 | fp16 | bf16 | fp8 (per layer: `precision: fp32`)
input: [B, S, C]                 # the input shape, in dims

# Blocks are reusable layer lists (optionally with parameters); `repeat` costs count x body
# without unrolling it.
blocks:
  encoder_block:
    - residual:                  # x + f(x)
        - layernorm: {{}}
        - attention: {{heads: heads}}
    - residual:
        - layernorm: {{}}
        - mlp: {{hidden: 4*C, fn: gelu}}

layers:
  - repeat: L
    name: blocks
    body: encoder_block
  - layernorm: {{}}
"""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def schema_path() -> Path:
    """The JSON Schema shipped with the package (in a checkout: schemas/costspec.schema.json)."""
    return Path(str(resources.files("costspec") / "data" / "costspec.schema.json")).resolve()


def schema_ref(spec_file: Path) -> str:
    """The schema as the new file should reference it: relative to its folder when possible."""
    target, folder = schema_path(), spec_file.resolve().parent
    try:
        if os.path.commonpath([target, folder]) != os.path.abspath(os.sep):  # same project: a path that travels
            return Path(os.path.relpath(target, folder)).as_posix()
    except ValueError:  # another drive (Windows)
        pass
    return target.as_uri()


def starter_spec(name: str, file: Path, schema: str | None = None) -> str:
    if not _NAME.fullmatch(name):
        raise UsageError(f"init {name!r}: a spec name is letters, digits, '_' and '-', not starting with a digit")
    line = schema_line(schema or schema_ref(file))
    return _TEMPLATE.format(schema_line=line, name=name, file=for_terminal(file.name))


def schema_line(schema: str) -> str:
    """The `# yaml-language-server: $schema=` comment; a control character in the path or URL (a newline
    would end the comment and make the rest live YAML) is written as its escape."""
    return SCHEMA_LINE.format(schema=for_terminal(schema))


def write_starter(name: str, output: str | None = None, schema: str | None = None) -> Path:
    """Write the starter spec to `output` (default NAME.yaml); never overwrite an existing file."""
    path = Path(output or f"{name}.yaml")
    text = starter_spec(name, path, schema)
    try:
        with path.open("x", encoding="utf-8") as f:
            f.write(text)
    except FileExistsError:
        raise UsageError(f"{path} exists; costspec init does not overwrite files (choose another name or -o)") from None
    return path
