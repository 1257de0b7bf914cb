"""The published schema is generated from the registry and must not drift."""
import json

import jsonschema
import pytest
import yaml

from costspec.ops import spec_ops
from costspec.spec.schema import build_schema, schema_json
from tests.common import ROOT, SPECS


def test_committed_schema_matches_the_registry():
    committed = (ROOT / "schemas/costspec.schema.json").read_text(encoding="utf-8")
    assert committed == schema_json(), "schema drifted: run `python tools/gen_schema.py` and commit"


def test_schema_op_names_and_attributes_come_from_the_registry():
    layer = build_schema()["$defs"]["layer"]["properties"]
    for name, op in spec_ops().items():
        assert set(layer[name]["properties"]) == {a.name for a in op.attrs}
    assert "fanout" not in layer  # engine-internal op, not written in specs
    assert "add" in layer and "with" in layer["add"]["properties"]  # a join a spec writes with `with:`


@pytest.mark.slow
def test_the_schema_is_valid_and_accepts_every_zoo_spec():
    schema = json.loads((ROOT / "schemas/costspec.schema.json").read_text())
    jsonschema.validators.validator_for(schema).check_schema(schema)
    for spec in SPECS:
        jsonschema.validate(yaml.safe_load(spec.read_text()), schema)


# -- the schema in the editor ----------------------------------------------------------------------
SCHEMA_LINE = "# yaml-language-server: $schema=../schemas/costspec.schema.json"


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_every_spec_starts_with_the_editor_schema_line(spec):
    first = spec.read_text().splitlines()[0]
    assert first == SCHEMA_LINE
    assert (spec.parent / first.split("=", 1)[1]).resolve() == (ROOT / "schemas/costspec.schema.json").resolve()


def test_schema_completes_every_op_attribute_with_a_description():
    from costspec.ops import spec_ops

    layer = json.loads((ROOT / "schemas/costspec.schema.json").read_text())["$defs"]["layer"]["properties"]
    for name, op in spec_ops().items():
        assert layer[name]["description"], name
        props = layer[name]["properties"]
        assert set(props) == {a.name for a in op.attrs}, name
        for attr in op.attrs:
            assert props[attr.name].get("description"), f"{name}.{attr.name} has no description"
    assert build_schema()["$defs"]["layer"]["properties"].keys() == layer.keys()
