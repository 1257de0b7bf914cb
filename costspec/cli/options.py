"""Options shared by several commands, defined once."""
from __future__ import annotations

import click

from costspec.core.conventions import DTYPES
from costspec.core.errors import UsageError
from costspec.core.vocab import RUNNABLE_PASSES, Device, Format, Fusion, Pass


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
pass_ = click.option("--pass", "pass_", type=click.Choice(Pass.choices()), default=Pass.FORWARD.value,
                     show_default=True, help="Which pass to cost (train = forward + backward).")
depth = click.option("--depth", type=click.IntRange(min=1), default=None,
                     help="Show only the top N levels of the layer tree.")


def output_format(*choices: str, default: str = Format.TABLE.value):
    """--format with these choices (default: every format of the one renderer)."""
    return click.option("--format", "fmt", type=click.Choice(list(choices) or Format.choices()), default=default,
                        show_default=True, help="Output format.")


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


def closed_forms(f):
    """The options `formula` and `latex` share: SPEC, --keep, --set, --pass, --per-layer, --expand."""
    for option in (expand, per_layer, pass_, sets, keep, spec_arg):
        f = option(f)
    return f

# costspec validate
validate_pass = click.option("--pass", "pass_", type=click.Choice([p.value for p in RUNNABLE_PASSES]),
                             default=Pass.FORWARD.value, show_default=True,
                             help="Which pass to run and count (train = forward + backward).")
device = click.option("--device", type=click.Choice(Device.choices()), default=Device.META.value, show_default=True,
                      help="Where the torch module runs: meta (shapes only, fast) or cpu (real tensors).")
rtol = click.option("--rtol", type=click.FloatRange(min=0), default=0.0, show_default=True,
                    help="Relative tolerance on matmul-class FLOPs per row (pointwise counts must match exactly).")


def _parse_efficiency(ctx, param, value):
    from costspec.analysis.roofline import Efficiency

    if not value:
        return Efficiency()
    fields = {}
    for item in value.split(","):
        key, sep, number = item.partition("=")
        try:
            if not sep or key.strip() not in ("tc", "cuda", "memory") or not 0 < float(number) <= 1:
                raise ValueError
            fields[key.strip()] = float(number)
        except ValueError:
            raise click.BadParameter(f"{item!r}: expected tc|cuda|memory=FRACTION in (0, 1]") from None
    return Efficiency(**fields)


def gpu(required: bool):
    """--gpu NAME and --catalog FILE (a user's GPU catalog)."""

    def decorate(f):
        f = click.option("--catalog", type=click.Path(dir_okay=False, exists=True), default=None,
                         help="Your own GPU catalog (YAML), added to the built-in one.")(f)
        return click.option("--gpu", required=required, default=None, metavar="NAME",
                            help="A GPU from `costspec gpus`, e.g. h100-sxm: adds bytes, intensity, bound and "
                                 "estimated time.")(f)

    return decorate


fusion = click.option("--fusion", type=click.Choice(Fusion.choices()), default=Fusion.DEFAULT.value,
                      show_default=True, help="Which kernels are assumed fused (see docs: fusion assumptions).")
efficiency = click.option("--efficiency", callback=_parse_efficiency, default=None, metavar="tc=F,cuda=F,memory=F",
                          help="Fractions of the peaks reached (default 1 = datasheet).")


# ragged batches, Tensor-Core alignment, precision ladder (costspec.analysis.ragged / .alignment / .ladder)
def _parse_lengths(ctx, param, value):
    from costspec.analysis.ragged import parse_lengths

    return None if value is None else parse_lengths(value)


lengths = click.option("--lengths", callback=_parse_lengths, default=None, metavar="3,5,2",
                       help="A ragged batch: one sequence length per sequence; costs padded (B x max) and packed "
                            "(sum over sequences) side by side.")
lengths_file = click.option("--lengths-file", type=click.Path(dir_okay=False, exists=True), default=None,
                            help="A ragged batch from a file, one sequence length per line (# comments allowed).")
seq_dim = click.option("--seq-dim", default="S", show_default=True, metavar="NAME",
                       help="The spec's (free) sequence dim that --lengths varies per sequence.")
alignment = click.option("--alignment", type=click.Choice(["warn", "strict"]), default="warn", show_default=True,
                         help="Misaligned GEMMs (Tensor-Core rules): warn lists them; strict also charges them to "
                              "CUDA cores on GPUs that fall back (compute capability < 8.0; needs --gpu).")
ladder = click.option("--ladder", is_flag=True,
                      help="With --gpu: one row per precision the GPU runs (bytes, intensity, bound, time, speed-up "
                           "vs fp32 and bf16).")


def ragged_lengths(lengths, lengths_file) -> list[int] | None:
    """The lengths of --lengths or --lengths-file (not both)."""
    from costspec.analysis.ragged import read_lengths_file

    require(not (lengths and lengths_file), "give --lengths or --lengths-file, not both")
    return read_lengths_file(lengths_file) if lengths_file else lengths


# --dtype on eval, sweep, formula, report
dtype = click.option("--dtype", type=click.Choice(list(DTYPES)), default=None,
                     help="Override the spec's default precision (layers with their own `precision:` keep it).")
quiet = click.option("--quiet", "-q", is_flag=True, help="No progress on stderr (it is shown only on a terminal).")
