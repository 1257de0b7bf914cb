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
