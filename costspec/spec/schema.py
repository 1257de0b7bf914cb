"""The spec language's JSON Schema, generated from the op registry.

`schemas/costspec.schema.json` is this function's output, committed; a test fails if the two
drift. Layers key on the op name (one property per op), never `oneOf` over ops, so a schema
error lands on the layer and attribute the user wrote.
"""
from __future__ import annotations

import json

from costspec.core.conventions import DEFAULT_GROUP, DENSE, DTYPES, SPARSITY_PATTERNS, UNQUANTISED, WEIGHT_FORMATS
from costspec.core.cost_table import default_table
from costspec.ops import spec_ops

FORMAT_VERSION = 1
SCHEMA_ID = "https://costspec.dev/schemas/costspec.schema.json"
COMPOSITION_KEYS = ("residual", "parallel", "sequence", "repeat", "block")
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"

_SIZE = {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string"}],
         "x-expected": "a positive integer or an expression string"}
_COUNT = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string"}],
          "x-expected": "a non-negative integer or an expression string"}
_LAYERS = {"type": "array", "items": {"$ref": "#/$defs/layer"}, "minItems": 1}
_SPARSITY = {"anyOf": [{"enum": [*SPARSITY_PATTERNS, DENSE]}],
             "x-expected": '"2:4" (quoted: unquoted 2:4 is the base-60 integer 124 in YAML) or none',
             "description": '"2:4": weight GEMMs run on Sparse Tensor Cores (forward); none: dense'}
_PRECISION = {"type": "object", "additionalProperties": False,
              "properties": {"dtype": {"enum": list(DTYPES)}, "sparsity": _SPARSITY,
                             "compute": {"enum": list(DTYPES),
                                         "description": "the dtype GEMMs run in (dtype's name beside weights)"},
                             "weights": {"enum": [*WEIGHT_FORMATS, UNQUANTISED],
                                         "description": "GEMM / conv weight matrices stored quantised (none: at "
                                                        "the dtype)"},
                             "group": {"type": "integer", "minimum": 1,
                                       "description": "quantised weights: values per scale along k (default "
                                                      f"{DEFAULT_GROUP})"},
                             "lora": {"type": "integer", "minimum": 0,
                                      "description": "rank of a LoRA adapter on each weight GEMM, whose weight "
                                                     "matrix is then frozen (0: no adapters)"}}}
_MODULE_PATH = r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$"
_MODULE_PATTERN = r"^(([A-Za-z0-9_]+|\*)(\.([A-Za-z0-9_]+|\*))*)?$"  # "": the model itself (its own forward)
_IGNORE = {"type": "array", "minItems": 1,
           "items": {"type": "object", "additionalProperties": False, "required": ["module", "reason"],
                     "properties": {"module": {"type": "string", "pattern": _MODULE_PATTERN,
                                               "description": "a module path of the real model (* = any one name; "
                                                              "\"\": the model itself)"},
                                    "reason": {"type": "string", "minLength": 1,
                                               "description": "why the spec leaves it out"},
                                    "kinds": {"type": "array", "minItems": 1, "items": {"type": "string"},
                                              "description": "only this work (matmul, or pointwise kinds such as "
                                                             "add or unknown:aten.neg); default: the whole module, "
                                                             "parameters included"},
                                    "extra": {"type": "object", "minProperties": 1,
                                              "additionalProperties": {"anyOf": [{"type": "integer"},
                                                                                 {"type": "string"}]},
                                              "description": "instead of leaving work out: the real model runs "
                                                             "exactly this much more of each kind (an expression "
                                                             "of the dims) in these modules, a named rule"},
                                    "pass": {"enum": ["forward", "backward"],
                                             "description": "only in this pass; default: both"}}},
           "x-expected": "a list of {module, reason}",
           "description": "real modules the spec leaves out on purpose (validate --against lists what they ran)"}
_ARGS = {"type": "object", "propertyNames": {"pattern": NAME_PATTERN},
         "additionalProperties": {"anyOf": [{"type": "integer"}, {"type": "number"}, {"type": "string"},
                                            {"type": "boolean"}]},
         "description": "values for a block's parameters (numbers or expressions of the dims)"}


def build_schema() -> dict:
    """The full JSON Schema (draft 2020-12) of a costspec file."""
    ops = spec_ops()
    layer_props: dict = {name: op.schema() for name, op in sorted(ops.items())}
    layer_props.update({
        "name": {"type": "string", "pattern": NAME_PATTERN, "description": "this layer's name in dotted paths"},
        "precision": {"anyOf": [{"enum": list(DTYPES)}, _PRECISION],
                      "x-expected": "a dtype (" + ", ".join(DTYPES) + ") or {dtype, sparsity, weights, group, compute}",
                      "description": "override the spec's precision for this layer (keys left out keep it)"},
        "residual": {"anyOf": [_LAYERS, {"type": "object", "additionalProperties": False,
                                         "required": ["body", "shortcut"],
                                         "properties": {"body": _LAYERS, "shortcut": _LAYERS}}],
                     "x-expected": "a list of layers (x + f(x)), or {body: [layers], shortcut: [layers]}",
                     "description": "x + f(x), f = these layers in sequence; or body(x) + shortcut(x) "
                                    "(a projection shortcut)"},
        "parallel": {"type": "object", "additionalProperties": False, "required": ["branches"],
                     "properties": {
                         "branches": {"type": "array", "minItems": 2,
                                      "items": {"type": "array", "items": {"$ref": "#/$defs/layer"}},
                                      "description": "each a list of layers run on the fork's value; [] is "
                                                     "the value itself"},
                         "join": {"enum": ["add", "mul", "concat"],
                                  "description": "how the branch outputs are joined (default add)"},
                         "axis": {"type": "integer", "description": "concat's axis (default -1)"}},
                     "x-expected": "{branches: [[layers], [layers], ...], join: add | mul | concat, axis}",
                     "description": "branches forking from the running value, joined: add (n - 1 adds per "
                                    "element), mul (broadcasting) or concat along `axis`"},
        "save": {"type": "string", "pattern": NAME_PATTERN,
                 "description": "name this layer's output, for later layers to read (`input:`, `with:`, `kv:`)"},
        "input": {"type": "string", "pattern": NAME_PATTERN,
                  "description": "run this layer on a saved value or a model input (`inputs:`) instead of the "
                                 "previous layer's output"},
        "sequence": {**_LAYERS, "description": "these layers in sequence (a named scope when `name` is set)"},
        "repeat": {**_SIZE, "description": "repeat `body` this many times; costed as count x body, never unrolled"},
        "body": {"anyOf": [{"type": "string", "pattern": NAME_PATTERN}, _LAYERS],
                 "x-expected": "a block name or a list of layers", "description": "the repeated layers"},
        "block": {"type": "string", "pattern": NAME_PATTERN, "description": "use a block from `blocks:`"},
        "checkpoint": {"anyOf": [{"type": "boolean"},
                                 {"type": "object", "additionalProperties": False, "required": ["every"],
                                  "properties": {"every": {"type": "integer", "minimum": 1}}}],
                       "x-expected": "true, false, or {every: N} (a repeat's instances 0, N, 2N, ...)",
                       "description": "activation checkpointing of a block use or of each instance of a repeat: "
                                      "its forward runs again in backward (torch.utils.checkpoint)"},
        "args": _ARGS,
        "source": {"anyOf": [{"type": "string", "pattern": _MODULE_PATH},
                             {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": _MODULE_PATH}}],
                   "x-expected": "a module path of the real model, or a list of them",
                   "description": "the real model's module(s) this layer is (validate --against); relative to "
                                  "the enclosing layer's source; a repeat's source holds its instances 0, 1, ..."},
        "at": {"type": "array", "minItems": 1, "description": "per-index variants of a repeat's body",
               "items": {"type": "object", "additionalProperties": False, "required": ["indices"],
                         "properties": {
                             "indices": {"type": "array", "minItems": 1, "uniqueItems": True,
                                         "items": {"type": "integer", "minimum": 0}},
                             "args": _ARGS,
                             "name": {"type": "string", "pattern": NAME_PATTERN},
                         }}},
    })
    dim = {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string"},
                     {"type": "object", "additionalProperties": False,
                      "properties": {"value": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string"}]},
                                     "doc": {"type": "string"},
                                     "keep": {"type": "boolean"}},
                      "required": ["value"]}],
           "x-expected": "a positive integer (free dim), an expression string (derived dim), "
                         "or {value, doc, keep}"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "costspec model spec",
        "type": "object",
        "additionalProperties": False,
        "required": ["costspec", "name", "input", "layers"],
        "properties": {
            "costspec": {"const": FORMAT_VERSION, "description": "format version"},
            "name": {"type": "string", "minLength": 1},
            "doc": {"type": "string"},
            "source": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
                       "description": "paper / config the spec follows"},
            "dims": {"type": "object", "propertyNames": {"pattern": NAME_PATTERN},
                     "additionalProperties": dim, "description": "named sizes; each is a sympy symbol"},
            "precision": _PRECISION,
            "costs": {"type": "object", "propertyNames": {"pattern": NAME_PATTERN},
                      "properties": {kind: {"type": "number", "minimum": 0} for kind in sorted(default_table())},
                      "additionalProperties": {"type": "number", "minimum": 0},
                      "description": "override CUDA-core FLOPs per element of cost-table kinds; a new kind with "
                                     "its _backward declares an activation (fn: name)"},
            "input": {"type": "array", "minItems": 1, "items": _SIZE, "description": "input shape"},
            "inputs": {"type": "object", "propertyNames": {"pattern": NAME_PATTERN}, "minProperties": 1,
                       "additionalProperties": {"type": "array", "minItems": 1, "items": _SIZE},
                       "description": "further model inputs by name (an encoder's output for cross-attention, "
                                      "a decoder's tokens), read with `input:`, `with:` or `kv:`"},
            "blocks": {"type": "object", "propertyNames": {"pattern": NAME_PATTERN},
                       "additionalProperties": {"$ref": "#/$defs/block"}},
            "layers": _LAYERS,
            "ignore": _IGNORE,
        },
        "$defs": {
            "layer": {"type": "object", "additionalProperties": False, "minProperties": 1,
                      "properties": layer_props, "x-costspec": "layer"},
            "block": {"anyOf": [_LAYERS, {"type": "object", "additionalProperties": False, "required": ["layers"],
                                          "properties": {"doc": {"type": "string"},
                                                         "params": {"type": "object",
                                                                    "propertyNames": {"pattern": NAME_PATTERN},
                                                                    "additionalProperties": _ARGS[
                                                                        "additionalProperties"]},
                                                         "layers": _LAYERS}}],
                      "x-expected": "a list of layers or {params, layers, doc}"},
        },
    }


def schema_json() -> str:
    """The schema as committed: sorted keys, two-space indent, trailing newline."""
    return json.dumps(build_schema(), indent=2, sort_keys=True) + "\n"
