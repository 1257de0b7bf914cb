"""`costspec validate`: analytic costs vs FlopCounterMode and the aten ops of the spec's torch module,
or (--against) of the user's real model."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import click

from costspec.cli import cli, options
from costspec.cli.options import Bindings, Display, Serving


@dataclass(frozen=True)
class Counting:
    """What is run and counted: --pass, on --device, compared within --rtol, with --checkpoint (activation
    checkpointing: the generated module runs the checkpointed parts under torch.utils.checkpoint)."""

    pass_: str
    device: str
    rtol: float
    checkpoint: str | None = None
    saved: bool = False


@dataclass(frozen=True)
class Against:
    """The real model to check the spec against (--against; None: the spec's own torch module), its
    Hugging Face config (--config, --config-set) and which of its outputs the spec's is (--output-field)."""

    against: str | None
    config: str | None
    config_sets: Mapping[str, str]
    output_field: str | None

    def check_unused(self) -> None:
        """Without --against, the options that only apply to it are errors."""
        options.require(self.config is None and not self.config_sets,
                        "--config and --config-set need --against hf:ModelClass")
        options.require(self.output_field is None, "--output-field needs --against")


def _config_sets(ctx, param, values) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE")
        out[key.strip()] = value
    return out


counting_options = options.option_group(
    "counting", Counting, options.runnable_pass, options.device, options.rtol, options.checkpoint,
    click.option("--saved-bytes", "saved", is_flag=True,
                 help="With --pass train: also compare the bytes each layer saves for backward with what autograd "
                      "saves on the generated module (saved_tensors_hooks, deduplicated by storage), or with "
                      "--against (on meta) on the real model, per matched layer, differences as named rules."))
against_options = options.option_group(
    "target", Against,
    click.option("--against", "against", metavar="TARGET", default=None,
                 help="Check the spec against your real model: package.module:callable (takes the spec's dims as "
                      "keyword arguments, returns an nn.Module or (module, inputs)) or hf:ModelClass (transformers, "
                      "built on meta from its config, no weights)."),
    click.option("--config", "config", type=options.InputFile("Hugging Face config"), default=None,
                 help="With --against hf:ModelClass: a Hugging Face config.json (default: the class's default "
                      "config)."),
    click.option("--config-set", "config_sets", multiple=True, callback=_config_sets, metavar="KEY=VALUE",
                 help="With --against hf:ModelClass: set a config key, or a constructor argument such as "
                      "add_pooling_layer=false (repeatable)."),
    click.option("--output-field", "output_field", metavar="NAME", default=None,
                 help="With --against: the output of the real model that the spec's output is (a field of a "
                      "transformers output such as pooler_output, or a tuple index); default: its first tensor."))


@cli.command("validate")
@options.spec_arg
@options.bindings
@counting_options
@options.display("table", "json")
@click.option("--force", is_flag=True, help="Run on cpu even when the estimated memory exceeds what is available.")
@against_options
@options.serving_run
def validate_command(spec: str, dims: Bindings, counting: Counting, display: Display, force: bool, target: Against,
                     serving: Serving):
    """Build SPEC's torch module (or, with --against, your real model), count it, and compare per layer;
    exit 1 on any mismatch. Without --against this checks the engine against itself, not your model.

    --backend sets every attention layer's kernel family, in the costs and in the generated module: math runs
    PyTorch's math SDPA, eager explicit matmuls, flash the fused kernel where torch runs one (on cpu; on meta
    SDPA always decomposes, and validate names the difference: sdpa-math-decomposition)."""
    from dataclasses import replace

    from costspec.core.progress import status
    from costspec.core.render import render

    options.require(serving.phase is None or counting.pass_ == "forward",
                    f"--phase {serving.phase} serves a model: it runs forward only (drop --pass {counting.pass_})")
    model = replace(serving, checkpoint=counting.checkpoint).load(spec)
    values = dims.bind(model)
    pass_, device = counting.pass_, counting.device
    if target.against is None:
        target.check_unused()
        from costspec.runtime.validate import check, to_result, validate

        with status(f"validate: building and counting {model.name} ({pass_}, {device})", display.quiet):
            result = validate(model, values, pass_, device, counting.rtol, force, counting.saved)
        click.echo(render(to_result(result), display.fmt))
        check(result)
        return
    from costspec.against.check import check as check_against
    from costspec.against.check import validate_against
    from costspec.against.report import to_result as against_result
    from costspec.against.target import load_target, no_exit

    with status(f"validate: counting {target.against} against {model.name} ({pass_}, {device})", display.quiet), \
            no_exit(target.against):  # an exit from the user's code is an error, never a green run
        real = load_target(target.against, model, values, device, target.config, target.config_sets,
                           target.output_field, force)
        outcome = validate_against(model, values, real, pass_, device, counting.rtol)
        if counting.saved:
            from costspec.against.saved import saved_against

            outcome.saved, outcome.saved_notes = saved_against(
                model, values, real, outcome.rowmap, outcome.pass_, outcome.device,
                lambda backend: replace(serving, backend=backend, checkpoint=counting.checkpoint).load(spec))
    click.echo(render(against_result(outcome), display.fmt))
    check_against(outcome)
