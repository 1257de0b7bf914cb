"""The commands' options, declared once: single options, and option groups.

An option group (`option_group`) declares a related set of click options on a command and hands the
command ONE frozen value object for them instead of one argument per option: `Bindings` (--batch,
--set), `PassPrecision` (--pass, --dtype), `Hardware` (--gpu, --catalog, --fusion, --efficiency),
`Ragged` (--lengths, --lengths-file, --seq-dim), `ClosedForm` (the closed forms of formula and latex)
and `Display` (--format, --quiet). A group's options show in help in the order it declares them.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

import click

from costspec.core.conventions import DTYPES
from costspec.core.errors import UsageError
from costspec.core.vocab import RUNNABLE_PASSES, Device, Format, Fusion, Pass

if TYPE_CHECKING:
    from costspec.analysis.gpus import Gpu
    from costspec.analysis.roofline import Efficiency
    from costspec.tree.network import Network

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def option_group(name: str, make: Callable[..., Any], *params: Decorator) -> Decorator:
    """A decorator that declares `params` (click options or arguments, shown in this order) on a command
    and passes the command `make(**their values)` as the keyword argument `name`."""

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def command(*args: Any, **kwargs: Any) -> Any:
            kwargs[name] = make(**{key: kwargs.pop(key) for key in keys})
            return f(*args, **kwargs)

        decorated: Callable[..., Any] = command
        before = len(getattr(decorated, "__click_params__", ()))
        for param in reversed(params):  # click lists a command's parameters in the reverse order of decorating
            decorated = param(decorated)
        keys = [p.name for p in getattr(decorated, "__click_params__", [])[before:]]
        return decorated

    return decorate


def require(condition: bool, message: str) -> None:
    if not condition:
        raise UsageError(message)


# -- single options ------------------------------------------------------------------------------
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
runnable_pass = click.option("--pass", "pass_", type=click.Choice([p.value for p in RUNNABLE_PASSES]),
                             default=Pass.FORWARD.value, show_default=True,
                             help="Which pass to run and count (train = forward + backward).")
depth = click.option("--depth", type=click.IntRange(min=1), default=None,
                     help="Show only the top N levels of the layer tree.")
# --dtype on eval, sweep, formula, report: the precision the analytic costs assume
dtype = click.option("--dtype", type=click.Choice(list(DTYPES)), default=None,
                     help="Override the spec's default precision (layers with their own `precision:` keep it).")
# --dtype on time and ncu run: the dtype torch runs in
run_dtype = click.option("--dtype", type=click.Choice(["fp32", "tf32", "fp16", "bf16"]), default=None,
                         help="Run in this dtype (default: the spec's precision).")
quiet = click.option("--quiet", "-q", is_flag=True, help="No progress on stderr (it is shown only on a terminal).")


def output_format(*choices: str, default: str = Format.TABLE.value) -> Decorator:
    """--format with these choices (default: every format of the one renderer)."""
    return click.option("--format", "fmt", type=click.Choice(list(choices) or Format.choices()), default=default,
                        show_default=True, help="Output format.")


def gpu(required: bool) -> Decorator:
    return click.option("--gpu", required=required, default=None, metavar="NAME",
                        help="A GPU from `costspec gpus`, e.g. h100-sxm: adds bytes, intensity, bound and "
                             "estimated time.")


catalog = click.option("--catalog", type=click.Path(dir_okay=False, exists=True), default=None,
                       help="Your own GPU catalog (YAML), added to the built-in one.")
fusion = click.option("--fusion", type=click.Choice(Fusion.choices()), default=Fusion.DEFAULT.value,
                      show_default=True, help="Which kernels are assumed fused (see docs: fusion assumptions).")


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


efficiency = click.option("--efficiency", callback=_parse_efficiency, default=None, metavar="tc=F,cuda=F,memory=F",
                          help="Fractions of the peaks reached (default 1 = datasheet).")


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


def _parse_keep(ctx, param, value) -> tuple[str, ...] | None:
    return None if value is None else tuple(n.strip() for n in value.split(",") if n.strip())


keep = click.option("--keep", callback=_parse_keep, metavar="B,S,C",
                    help="Dims to keep as symbols (default: the free dims and those marked keep); "
                         "the others are replaced by their values.")
expand = click.option("--expand", is_flag=True, help="Write derived dims (e.g. S) out by their definitions.")
per_layer = click.option("--per-layer", is_flag=True, help="One formula per layer, every level of the tree.")
device = click.option("--device", type=click.Choice(Device.choices()), default=Device.META.value, show_default=True,
                      help="Where the torch module runs: meta (shapes only, fast) or cpu (real tensors).")
rtol = click.option("--rtol", type=click.FloatRange(min=0), default=0.0, show_default=True,
                    help="Relative tolerance on matmul-class FLOPs per row (pointwise counts must match exactly).")


# -- option groups -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bindings:
    """The dims a command binds: --batch (B) and --set NAME=VALUE."""

    batch: int | None = None
    sets: Mapping[str, int] = field(default_factory=dict)

    def bind(self, model: Network) -> dict:
        """The model's dims at these bindings (bad dims fail here, before any work)."""
        return model.bind(self.batch, self.sets)


@dataclass(frozen=True)
class PassPrecision:
    """Which pass a command costs or runs (--pass), and in which dtype (--dtype; None: the spec's)."""

    pass_: str
    dtype: str | None = None


@dataclass(frozen=True)
class Hardware:
    """The GPU of the roofline (--gpu; None: no roofline) from the catalog (--catalog added to the built-in
    one), and how its time is estimated (--fusion, --efficiency)."""

    gpu: str | None = None
    catalog: str | None = None
    fusion: str = Fusion.DEFAULT.value
    efficiency: Efficiency | None = None

    def device(self) -> Gpu | None:
        """The GPU's entry in the catalog (None without --gpu)."""
        if not self.gpu:
            return None
        from costspec.analysis.gpus import get_gpu

        return get_gpu(self.gpu, self.catalog)


@dataclass(frozen=True)
class Ragged:
    """A ragged batch: --lengths or --lengths-file (not both), over the sequence dim --seq-dim."""

    lengths: list[int] | None
    lengths_file: str | None
    seq_dim: str

    def read(self) -> list[int] | None:
        """The sequence lengths (None: not a ragged batch)."""
        from costspec.analysis.ragged import read_lengths_file

        require(not (self.lengths and self.lengths_file), "give --lengths or --lengths-file, not both")
        return read_lengths_file(self.lengths_file) if self.lengths_file else self.lengths


@dataclass(frozen=True)
class ClosedForm:
    """Which closed forms formula and latex write: --keep, --batch, --set, --pass, --per-layer, --expand."""

    keep: tuple[str, ...] | None
    batch: int | None
    sets: Mapping[str, int]
    pass_: str
    per_layer: bool
    expand: bool

    def substituted(self) -> dict[str, int]:
        """The dims substituted by value: --set, and B from --batch."""
        out = dict(self.sets)
        if self.batch is not None:
            require("B" not in out, f"--batch {self.batch} and --set B={out.get('B')} both bind B; give one")
            out["B"] = self.batch
        return out


@dataclass(frozen=True)
class Display:
    """How a command shows its result: --format on stdout, and progress on stderr unless --quiet."""

    fmt: str
    quiet: bool


bindings = option_group("dims", Bindings, batch, sets)
pass_precision = option_group("run", PassPrecision, pass_, dtype)  # eval, report, sweep
pass_only = option_group("run", PassPrecision, pass_)  # roofline: the spec's precision
run_pass_precision = option_group("run", PassPrecision, runnable_pass, run_dtype)  # time
ragged = option_group("ragged", Ragged, lengths, lengths_file, seq_dim)
closed_form = option_group("form", ClosedForm, keep, batch, sets, pass_, per_layer, expand)


def hardware(required: bool, estimate: bool = True) -> Decorator:
    """--gpu and --catalog; with `estimate`, also --fusion and --efficiency."""
    return option_group("hardware", Hardware, gpu(required), catalog, *((fusion, efficiency) if estimate else ()))


def display(*choices: str) -> Decorator:
    """--format (with these choices, as `output_format`) and --quiet."""
    return option_group("display", Display, output_format(*choices), quiet)
