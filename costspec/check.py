"""Static checks of spec files: every problem found, one per line, without evaluating costs."""
from __future__ import annotations

from .errors import SpecError
from .spec.load import read_bounded, schema_problems
from .spec.yaml_marks import load_marked


def check_file(path: str) -> list[SpecError]:
    """All schema problems of `path`; if the schema passes, the first semantic problem
    (dims, blocks, shapes) and every violated constraint at the dims' defaults."""
    try:
        doc = load_marked(read_bounded(path), path)
    except SpecError as exc:
        return [exc]
    problems = list(schema_problems(doc))
    if problems:
        return problems
    from .model import Model

    try:
        model = Model.__new__(Model)
        Model.__init__(model, doc)
    except SpecError as exc:
        return [exc]
    return model.problems(model.dims.values())
