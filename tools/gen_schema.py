"""Regenerate schemas/costspec.schema.json from the op registry: python tools/gen_schema.py"""
from pathlib import Path

from costspec.spec.schema import schema_json

target = Path(__file__).resolve().parent.parent / "schemas" / "costspec.schema.json"
target.write_text(schema_json(), encoding="utf-8")
print(f"wrote {target}")
