"""Option groups: a command gets one frozen value object per group, its options in the declared order."""
from __future__ import annotations

import dataclasses
import inspect

import click
import pytest
from click.testing import CliRunner

import costspec.cli as cli
from costspec.cli import options
from costspec.cli.options import Bindings, Hardware, PassPrecision


def _probe():
    seen = {}

    @click.command()
    @options.spec_arg
    @options.bindings
    @options.pass_precision
    @options.hardware(required=False, estimate=False)
    def probe(spec, dims, run, hardware):
        seen.update(spec=spec, dims=dims, run=run, hardware=hardware)

    return probe, seen


def test_each_group_hands_the_command_one_value():
    probe, seen = _probe()
    result = CliRunner().invoke(probe, ["s.yaml", "-b", "8", "--set", "img=384", "--pass", "train", "--dtype",
                                        "fp16", "--gpu", "h100-sxm"])
    assert result.exit_code == 0, result.output
    assert seen == {"spec": "s.yaml", "dims": Bindings(8, {"img": 384}), "run": PassPrecision("train", "fp16"),
                    "hardware": Hardware("h100-sxm", None)}


def test_values_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Bindings(1, {}).batch = 2  # type: ignore[misc]


def test_options_show_in_the_order_the_groups_declare_them():
    probe, _ = _probe()
    assert [p.name for p in probe.params] == ["spec", "batch", "sets", "pass_", "dtype", "gpu", "catalog"]


def test_a_bad_value_is_still_clicks_usage_error():
    probe, _ = _probe()
    result = CliRunner().invoke(probe, ["s.yaml", "--set", "img"])
    assert result.exit_code == 2 and "'img' is not NAME=VALUE" in result.output


def _commands():
    cli.register_all()
    for name, command in sorted(cli.cli.commands.items()):
        if isinstance(command, click.Group):
            yield from ((f"{name} {sub}", c) for sub, c in sorted(command.commands.items()))
        else:
            yield name, command


@pytest.mark.parametrize("name, command", list(_commands()), ids=lambda v: v if isinstance(v, str) else "")
def test_commands_take_a_few_values(name, command):
    assert len(inspect.signature(command.callback).parameters) <= 7, name  # eval: spec + six option groups
