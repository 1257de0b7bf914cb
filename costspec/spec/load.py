"""Spec text -> YAML with marks -> JSON Schema validation -> a validated, located document."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import jsonschema

from costspec.core.errors import Location, SpecError
from costspec.core.yaml_marks import MAX_BYTES, MarkedDoc, format_path, load_marked
from costspec.spec.schema import COMPOSITION_KEYS, build_schema

_REQUIRED = ("costspec", "name", "input", "layers")


@lru_cache(maxsize=1)
def _validator() -> jsonschema.protocols.Validator:
    schema = build_schema()
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def read_spec(path: str | Path) -> MarkedDoc:
    """Read and schema-validate a spec file; raise the best SpecError on failure."""
    return parse_spec(read_bounded(path), str(path))


def read_bounded(path: str | Path) -> bytes:
    """The bytes of a spec file, through the shared bounded reader (`costspec.core.safeio`): a regular
    file of at most MAX_BYTES bytes; a huge file, a FIFO or a device such as /dev/zero is an
    error, not a memory spike or a hang."""
    from costspec.core.safeio import SPEC, InputError, TooLargeError, read_bytes

    try:
        return read_bytes(path, SPEC)
    except TooLargeError as exc:  # located like every other spec error
        shown = f"{exc.size:,} bytes" if exc.size else f"more than {MAX_BYTES:,} bytes"
        raise SpecError(f"file is {shown}, over the limit for a spec", Location(str(path), 1, 1),
                        f"at most {MAX_BYTES:,} bytes") from None
    except InputError as exc:
        raise SpecError(str(exc)) from None


def parse_spec(text: str | bytes, file: str = "<spec>") -> MarkedDoc:
    """Parse and schema-validate spec text (see read_spec)."""
    problems = list(schema_problems(doc := load_marked(text, file)))
    if problems:
        raise problems[0]
    return doc


def schema_problems(doc: MarkedDoc) -> Iterator[SpecError]:
    """Every schema violation as a located SpecError, the most specific first."""
    if not isinstance(doc.data, dict):
        found = "null" if doc.data is None else f"{_kind(doc.data)} {_show(doc.data)}"
        yield SpecError(f"a spec must be a YAML mapping, got {found}", doc.locate(()),
                        "a mapping with keys " + ", ".join(_REQUIRED))
        return
    errors = schema_errors(doc)
    # a required key missing where an unknown key stands is most likely that key misspelt: one problem
    unknown_at = {tuple(e.absolute_path) for e in errors if e.validator == "additionalProperties"}
    errors = [e for e in errors if not (e.validator == "required" and tuple(e.absolute_path) in unknown_at)]
    seen = set()
    for error in errors:
        problem = _to_spec_error(doc, error)
        if str(problem) not in seen:
            seen.add(str(problem))
            yield problem


def schema_errors(doc: MarkedDoc) -> list[jsonschema.ValidationError]:
    """The schema's errors in `doc` (a mapping), each the most specific of its branches, the most specific first."""
    return sorted((_descend(e) for e in _validator().iter_errors(doc.data)), key=_rank)


def _descend(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """For an anyOf failure, the most specific error of the branches whose type fits the value
    (a list given for `body` is judged as a list of layers, not as a block name)."""
    if error.validator not in ("anyOf", "oneOf") or not error.context:
        return error
    depth = len(error.absolute_path)
    fitting = [e for e in error.context
               if not (e.validator in ("type", "enum", "const") and len(e.absolute_path) == depth)]
    if not fitting:
        return error
    return sorted((_descend(e) for e in fitting), key=_rank)[0]


def _rank(error: jsonschema.ValidationError):
    # Deeper paths are more specific; among equals prefer errors that name what was expected.
    weak = error.validator in ("anyOf", "oneOf", "minProperties")
    return (-len(error.absolute_path), weak, format_path(tuple(error.absolute_path)))


def _to_spec_error(doc: MarkedDoc, error: jsonschema.ValidationError) -> SpecError:
    path = tuple(error.absolute_path)
    where = doc.locate(path)
    schema = error.schema if isinstance(error.schema, dict) else {}
    value = error.instance
    kind = error.validator
    if kind == "additionalProperties" and isinstance(value, dict):
        extra = sorted(set(value) - set(schema.get("properties", {})))
        key = extra[0] if extra else "?"
        key_where = doc.locate(path + (key,))
        split = _split_by_comma(doc, path, value, key)
        if split:
            return split
        if schema.get("x-costspec") == "layer":
            ops = sorted(k for k, v in schema["properties"].items()
                         if isinstance(v, dict) and "properties" in v and k not in COMPOSITION_KEYS)
            present = [k for k in value if k in ops or k in COMPOSITION_KEYS]
            if present:  # the layer already has its op: the extra key is a second one, not a lone typo
                return SpecError(f"a layer has exactly one op or composition key: this one has '{present[0]}', "
                                 f"and '{key}' is not a key a layer may have beside it", key_where,
                                 f"'{key}' as a layer of its own (a new list item '- {key}: ...'), or one of "
                                 "name, precision, source, save, input, args, body, at")
            return SpecError(f"unknown op '{key}'", key_where,
                             "an op (" + ", ".join(ops) + ") or " + ", ".join(COMPOSITION_KEYS))
        allowed = ", ".join(sorted(schema.get("properties", {}))) or "no keys"
        what = "cost kind" if path == ("costs",) else "key"
        missing = [k for k in schema.get("required", ()) if k not in value]
        lacking = f"; {', '.join(missing)} is required and missing" if missing else ""
        return SpecError(f"unknown {what} '{key}'", key_where, f"one of: {allowed}{lacking}")
    if kind == "required":
        missing = [k for k in error.validator_value if k not in value]
        return SpecError(f"missing required key '{missing[0] if missing else '?'}'", where,
                         "a mapping with keys " + ", ".join(error.validator_value))
    expected = schema.get("x-expected")
    if kind in ("anyOf", "oneOf"):  # jsonschema's own message would show Python's repr (None, True)
        return SpecError(f"bad value {_show(value)}", where, expected or _alternatives(error.validator_value))
    if kind == "type":
        types = error.validator_value
        types = " or ".join(types) if isinstance(types, list) else types
        return SpecError(f"got {_kind(value)} {_show(value)}", where, expected or _article(types))
    if kind == "enum":
        return SpecError(f"bad value {_show(value)}", where,
                         "one of " + ", ".join(map(str, error.validator_value)))
    if kind == "const" and path == ("costspec",):
        return SpecError(f"unsupported format version {_show(value)}", where, f"costspec: {error.validator_value!r}")
    if kind == "const":
        return SpecError(f"bad value {_show(value)}", where, f"{error.validator_value!r}")
    if kind == "minimum":
        return SpecError(f"{_show(value)} is too small", where, expected or f"at least {error.validator_value}")
    if kind == "pattern":
        return SpecError(f"bad name {_show(value)}", where,
                         "a name of letters, digits and _, not starting with a digit")
    if kind == "minItems":
        return SpecError("empty list", where, f"at least {error.validator_value} item(s)")
    if kind in ("maxItems", "uniqueItems", "minLength", "minProperties"):
        return SpecError(error.message, where, expected)
    return SpecError(error.message, where, expected)


def _split_by_comma(doc: MarkedDoc, path: tuple, value: dict, key: str) -> SpecError | None:
    """An unknown key that is the tail of a value cut at an unquoted comma of a one-line {...} mapping
    (`{out: max(C, 2)}` reads as out: 'max(C' and a key '2)'): say so and show the quoting."""
    if not isinstance(key, str):
        return None
    here = doc.locate(path + (key,))
    same_line = [k for k in value if k != key and doc.locate(path + (k,)).line == here.line]
    unbalanced = key.count(")") > key.count("(") or key.count("]") > key.count("[")
    if not same_line or not (unbalanced or value[key] is None):
        return None
    before = [k for k in same_line if isinstance(value[k], str)]
    example = f'{before[-1]}: "{value[before[-1]]}, {key}"' if before else f'"..., {key}"'
    return SpecError(f"unknown key '{key}': in a {{...}} mapping an unquoted comma ends the value", here,
                     f"the value quoted, e.g. {example}")


def _article(types: str) -> str:
    return {"object": "a mapping", "array": "a list", "integer": "an integer", "string": "a string",
            "boolean": "true or false", "number": "a number", "object or null": "a mapping"}.get(types, types)


def _kind(value) -> str:
    """'a string', 'a list', ... for a YAML value, as a person would name its type."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a mapping"}.get(type(value), type(value).__name__)


def _alternatives(schemas: Any) -> str | None:
    """What an anyOf / oneOf accepts, from its alternatives' types: 'an integer or a string'."""
    kinds: list[str] = []
    for schema in schemas if isinstance(schemas, list) else []:
        types = schema.get("type") if isinstance(schema, dict) else None
        for name in types if isinstance(types, list) else [types] if isinstance(types, str) else []:
            if _article(name) not in kinds:
                kinds.append(_article(name))
    return " or ".join(kinds) or None


def _show(value) -> str:
    """A YAML value in a message, as YAML writes it where Python's repr differs (null, true, false)."""
    text = {type(None): "null", bool: str(value).lower()}.get(type(value)) or repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
