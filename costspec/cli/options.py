"""The commands' options, declared once: single options, and option groups.

An option group (`option_group`) declares a related set of click options on a command and hands the
command ONE frozen value object for them instead of one argument per option: `Bindings` (--batch,
--set), `PassPrecision` (--pass, --dtype), `Hardware` (--gpu, --catalog, --fusion, --efficiency),
`Ragged` (--lengths, --lengths-file, --seq-dim), `ClosedForm` (the closed forms of formula and latex)
and `Display` (--format, --quiet). A group's options show in help in the order it declares them.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

import click

from costspec.core.conventions import DTYPES
from costspec.core.errors import UsageError
from costspec.core.vocab import RUNNABLE_PASSES, Backend, Device, Format, Fusion, Pass, Serve

if TYPE_CHECKING:
    from costspec.analysis.gpus import Gpu
    from costspec.analysis.roofline import Efficiency
    from costspec.model import Model
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


# -- path types ----------------------------------------------------------------------------------
class InputFile(click.Path):
    """A path to a file the command reads, of one kind of `costspec.core.safeio.KINDS` (its name).

    Checked when the command line is parsed, by the bounded reader's rules (`safeio.check_input`:
    a regular file within the kind's size limit; a FIFO, a device such as /dev/zero or a directory is
    an error at once, with the reader's message, and nothing is read), then read through that reader.
    Every path option of a command that names an input is of this type (tests/cli/test_input_paths.py
    walks them).
    `zoo` (a spec): not checked here; the loader reads it through the same reader when the command
    runs (its messages give file:line, and `check` reports every file), and a name that is no file
    is a zoo key (`vit_b`). `dir_okay`: a folder is passed on (`import hf` reads its config.json
    through the reader)."""

    def __init__(self, kind: str, *, zoo: bool = False, dir_okay: bool = False):
        super().__init__(exists=not zoo, dir_okay=dir_okay or zoo)
        self.kind = kind
        self.zoo = zoo

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from costspec.core.safeio import KINDS, check_input

        path = os.fspath(value)
        if self.zoo:
            return value
        value = super().convert(value, param, ctx)
        if not (self.dir_okay and os.path.isdir(path)):
            check_input(path, KINDS[self.kind])  # an InputError: `costspec: error: ...`, exit 2, as when it is read
        return value


class OutputFile(click.Path):
    """A path the command writes (through `costspec.core.safeio`'s writer: atomic, never over an input)."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False)


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


spec_arg = click.argument("spec", type=InputFile("spec", zoo=True))
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


catalog = click.option("--catalog", type=InputFile("GPU catalog"), default=None,
                       help="Your own GPU catalog (YAML), added to the built-in one.")
fusion = click.option("--fusion", type=click.Choice(Fusion.choices()), default=Fusion.DEFAULT.value,
                      show_default=True, help="Which kernels are assumed fused (see docs: fusion assumptions).")


def _parse_efficiency(ctx, param, value):
    if not value:
        return None  # the datasheet peaks (every consumer reads None as Efficiency()); no import of the roofline
    from costspec.analysis.roofline import Efficiency

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
    if value is None:
        return None
    from costspec.analysis.ragged import parse_lengths

    return parse_lengths(value)


lengths = click.option("--lengths", callback=_parse_lengths, default=None, metavar="3,5,2",
                       help="A ragged batch: one sequence length per sequence; costs padded (B x max) and packed "
                            "(sum over sequences) side by side.")
lengths_file = click.option("--lengths-file", type=InputFile("lengths file"), default=None,
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


phase = click.option("--phase", type=click.Choice(Serve.choices()), default=None,
                     help="Serve a decoder: prefill (the input's S tokens, the key/value cache written) or decode "
                          "(one new token per sequence attending to --context cached tokens).")
context = click.option("--context", type=click.IntRange(min=1), default=None, metavar="N",
                       help="Tokens already in the key/value cache (a dim named N; default with --phase decode: "
                            "the spec's token count).")

backend = click.option("--backend", type=click.Choice([Backend.FLASH.value, Backend.MATH.value, Backend.EAGER.value]),
                       default=None, help="The attention kernel family every attention layer's cost follows "
                                          "(replaces the spec's `backend:`): flash, math or eager.")


def _parse_checkpoint(ctx, param, value):
    if value is None:
        return None
    from costspec.analysis.checkpointing import parse_checkpoint

    try:
        parse_checkpoint(value)
    except UsageError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


checkpoint = click.option("--checkpoint", callback=_parse_checkpoint, default=None, metavar="none|blocks|every:N",
                          help="Activation checkpointing (replaces the spec's `checkpoint:` keys): none; blocks (each "
                               "instance of every outermost repeat re-runs its forward in backward); every:N (the "
                               "instances 0, N, 2N, ... of each). Train and backward costs gain the recomputed "
                               "forward.")


# -- option groups -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bindings:
    """The dims a command binds: --batch (B) and --set NAME=VALUE."""

    batch: int | None = None
    sets: Mapping[str, int] = field(default_factory=dict)

    def bind(self, model: Network) -> dict:
        """The model's dims at these bindings (bad dims fail here, before any work); errors name the flags."""
        from costspec.core.dims import CLI_WORDS

        return model.bind(self.batch, self.sets, CLI_WORDS)


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
        require(not (self.lengths and self.lengths_file), "give --lengths or --lengths-file, not both")
        if not self.lengths_file:
            return self.lengths
        from costspec.analysis.ragged import read_lengths_file

        return read_lengths_file(self.lengths_file)


@dataclass(frozen=True)
class Serving:
    """How the model runs: a serving phase (--phase prefill|decode, --context N), the attention kernel
    family (--backend) and activation checkpointing (--checkpoint); None: as the spec is written."""

    phase: str | None = None
    context: int | None = None
    backend: str | None = None
    checkpoint: str | None = None

    def load(self, spec: str, dtype: str | None = None) -> Model:
        """The spec loaded for this phase, backend and checkpointing (`costspec.analysis.serving`,
        `costspec.analysis.checkpointing`)."""
        from costspec.core.dims import CLI_WORDS
        from costspec.model import load_worded

        return load_worded(spec, dtype, self.phase, self.context, self.backend, CLI_WORDS, self.checkpoint)

    @property
    def rewrites(self) -> bool:
        """Whether the spec is rewritten (a phase, a context, a backend or checkpointing given)."""
        return (self.phase, self.context, self.backend, self.checkpoint) != (None, None, None, None)


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


@dataclass(frozen=True)
class ImportParts:
    """Which parts of the model `import hf` writes: --tower (a dual-tower model's towers) and --no-pooler."""

    tower: str | None
    no_pooler: bool


import_parts = option_group(
    "parts", ImportParts,
    click.option("--tower", type=click.Choice(["vision", "text", "both", "encoder"]), default=None,
                 help="A model of two towers (CLIP, SigLIP, SigLIP 2, Gemma 3's vision tower and text decoder): the "
                      "towers the spec describes (default: both, joined as the class the header names runs them; "
                      "SigLIP 2: text only); an encoder-decoder (T5): encoder, the encoder alone (default: the whole "
                      "model)."),
    click.option("--no-pooler", is_flag=True,
                 help="End the spec before the pooler the model's AutoModel class builds (the header names the "
                      "class and output it then equals)."))


bindings = option_group("dims", Bindings, batch, sets)
pass_precision = option_group("run", PassPrecision, pass_, dtype)  # eval, report, sweep
pass_only = option_group("run", PassPrecision, pass_)  # roofline: the spec's precision
run_pass_precision = option_group("run", PassPrecision, runnable_pass, run_dtype)  # time
ragged = option_group("ragged", Ragged, lengths, lengths_file, seq_dim)
serving = option_group("serving", Serving, phase, context, backend, checkpoint)
# the commands that build the torch module (validate has --checkpoint among its counting options)
serving_run = option_group("serving", Serving, phase, context, backend)
closed_form = option_group("form", ClosedForm, keep, batch, sets, pass_, per_layer, expand)


def hardware(required: bool, estimate: bool = True) -> Decorator:
    """--gpu and --catalog; with `estimate`, also --fusion and --efficiency."""
    return option_group("hardware", Hardware, gpu(required), catalog, *((fusion, efficiency) if estimate else ()))


def display(*choices: str) -> Decorator:
    """--format (with these choices, as `output_format`) and --quiet."""
    return option_group("display", Display, output_format(*choices), quiet)
