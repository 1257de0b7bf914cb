"""Options shared by several commands, defined once."""
from __future__ import annotations

import click

from ..errors import UsageError


def _parse_sets(ctx, param, values) -> dict[str, int]:
    out = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"{item!r} is not NAME=VALUE")
        try:
            out[name.strip()] = int(value.replace("_", ""))
        except ValueError:
            raise click.BadParameter(f"{item!r}: VALUE must be an integer") from None
    return out


spec_arg = click.argument("spec", type=click.Path(dir_okay=False))
batch = click.option("--batch", "-b", type=click.IntRange(min=1), default=None, help="Bind the batch dim B.")
sets = click.option("--set", "sets", multiple=True, callback=_parse_sets, metavar="NAME=VALUE",
                    help="Bind a dim (repeatable), e.g. --set img=384.")
pass_ = click.option("--pass", "pass_", type=click.Choice(["forward", "backward", "train"]), default="forward",
                     show_default=True, help="Which pass to cost (train = forward + backward).")
depth = click.option("--depth", type=click.IntRange(min=1), default=None,
                     help="Show only the top N levels of the layer tree.")


def output_format(*choices: str, default: str = "table"):
    return click.option("--format", "fmt", type=click.Choice(list(choices)), default=default, show_default=True,
                        help="Output format.")


def require(condition: bool, message: str) -> None:
    if not condition:
        raise UsageError(message)


def _parse_keep(ctx, param, value) -> tuple[str, ...] | None:
    return None if value is None else tuple(n.strip() for n in value.split(",") if n.strip())


keep = click.option("--keep", callback=_parse_keep, metavar="B,S,C",
                    help="Dims to keep as symbols (default: the free dims and those marked keep); "
                         "the others are replaced by their values.")
expand = click.option("--expand", is_flag=True, help="Write derived dims (e.g. S) out by their definitions.")
per_layer = click.option("--per-layer", is_flag=True, help="One formula per layer, every level of the tree.")
