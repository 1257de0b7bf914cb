"""The spec layer: spec text -> a validated document (YAML with marks, checked against the
JSON Schema built from the op registry). May import `core` and `ops`."""
