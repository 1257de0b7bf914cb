"""Resolved attributes read by name: a YAML key that is a Python keyword takes a trailing underscore."""
import pytest

from costspec.core.errors import Location
from costspec.ops.attrs import Attrs


def test_keyword_keys_read_with_a_trailing_underscore():
    attrs = Attrs({"in": 8, "with": "skip", "out": 4}, Location("spec.yaml"))
    assert (attrs.in_, attrs.with_, attrs.out) == (8, "skip", 4)


def test_unknown_names_stay_attribute_errors():
    attrs = Attrs({"out": 4}, Location("spec.yaml"))
    with pytest.raises(AttributeError, match="in_"):
        _ = attrs.in_
    with pytest.raises(AttributeError, match="out_"):
        _ = attrs.out_  # `out` is no keyword: no alias
