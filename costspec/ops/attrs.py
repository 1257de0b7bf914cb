"""Op attributes: the kinds an attribute can have (each a JSON Schema fragment and the words an
error uses), one attribute's declaration (`Attr`), and a layer's resolved values (`Attrs`)."""
from __future__ import annotations

import keyword
from dataclasses import dataclass
from typing import Any

from costspec.core.errors import Location

REQUIRED = object()

_VALUE_NAME = {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"}
ATTR_SCHEMAS: dict[str, tuple[dict, str]] = {
    "values": ({"anyOf": [_VALUE_NAME, {"type": "array", "minItems": 1, "items": _VALUE_NAME}]},
               "the name of a saved value or model input, or a list of them"),
    "value": (_VALUE_NAME, "the name of a saved value or model input"),
    "size": ({"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string"}]},
             "a positive integer or an expression string"),
    "count": ({"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string"}]},
              "a non-negative integer or an expression string"),
    "pair": ({"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string"},
                        {"type": "array", "minItems": 2, "maxItems": 2,
                         "items": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string"}]}}]},
             "a non-negative integer, an expression, or a [height, width] pair of them"),
    "triple": ({"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string"},
                          {"type": "array", "minItems": 3, "maxItems": 3,
                           "items": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string"}]}}]},
               "a non-negative integer, an expression, or a [depth, height, width] triple of them"),
    "axes": ({"type": "array", "minItems": 1, "items": {"type": "integer"}},
             "a list of integer axes (negative counts from the end)"),
    "counts": ({"type": "array", "minItems": 1,
                "items": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string"}]}},
               "a list of non-negative integers or expressions"),
    "expr": ({"anyOf": [{"type": "number"}, {"type": "string"}]}, "a number or an expression of the dims"),
    "bool": ({"type": "boolean"}, "true or false"),
    "text": ({"type": "string"}, "any text (a description, never an expression)"),
    "number": ({"type": "number"}, "a number"),
    "axis": ({"type": "integer"}, "an integer axis (negative counts from the end)"),
    "shape": ({"type": "array", "minItems": 1,
               "items": {"anyOf": [{"type": "integer", "minimum": -1}, {"type": "string"}]}},
              "a list of sizes (integers or expressions; one -1 is inferred)"),
}


@dataclass(frozen=True)
class Attr:
    """One attribute of an op: its kind (schema), default, and a one-line doc.

    `default` is a value, REQUIRED, or a callable (input shape, resolved attrs so far) -> value
    for defaults that depend on the input (e.g. a linear layer's in_features).
    """

    name: str
    kind: str
    doc: str
    default: Any = REQUIRED
    choices: tuple = ()
    extensible: bool = False  # a choice that also takes an activation the spec's `costs:` declares (`fn`)

    def schema(self) -> dict:
        # bool and choice attributes also take the name of a block parameter (`bias: b`), resolved
        # and checked by the tree builder with the layer's location
        param = {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"}
        if self.kind == "choice":
            return {"anyOf": [{"enum": list(self.choices)}, param], "description": self.doc,
                    "x-expected": "one of " + ", ".join(self.choices) + " (or a block parameter's name)"}
        base, expected = ATTR_SCHEMAS[self.kind]
        if self.kind == "bool":
            return {"anyOf": [base, param], "description": self.doc,
                    "x-expected": "true or false (or a block parameter's name)"}
        return {**base, "description": self.doc, "x-expected": expected}


class Attrs:
    """Resolved attribute values of one layer (sympy expressions for sizes), read as attributes.

    An attribute whose YAML key is a Python keyword is read with a trailing underscore (PEP 8):
    linear's `in` is `attrs.in_`.
    """

    def __init__(self, values: dict[str, Any], loc: Location):
        self._values = values
        self.loc = loc

    def __getattr__(self, name: str) -> Any:
        key = name[:-1] if name.endswith("_") and keyword.iskeyword(name[:-1]) else name
        try:
            return self._values[key]
        except KeyError:
            raise AttributeError(name) from None

    def items(self):
        return self._values.items()

    def where(self, name: str | None = None) -> Location:
        return self.loc.child(name) if name else self.loc
