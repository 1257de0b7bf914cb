"""`costspec validate`: analytic costs vs FlopCounterMode and the aten ops of the spec's torch module,
or (--against) of the user's real model."""
from __future__ import annotations

import click

from costspec.cli import cli, options


def _config_sets(ctx, param, values) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE")
        out[key.strip()] = value
    return out


@cli.command("validate")
@options.spec_arg
@options.batch
@options.sets
@options.validate_pass
@options.device
@options.rtol
@options.output_format("table", "json")
@options.quiet
@click.option("--force", is_flag=True, help="Run on cpu even when the estimated memory exceeds what is available.")
@click.option("--against", "against", metavar="TARGET", default=None,
              help="Check the spec against your real model: package.module:callable (takes the spec's dims as "
                   "keyword arguments, returns an nn.Module or (module, inputs)) or hf:ModelClass (transformers, "
                   "built on meta from its config, no weights).")
@click.option("--config", "config", type=click.Path(dir_okay=False, exists=True), default=None,
              help="With --against hf:ModelClass: a Hugging Face config.json (default: the class's default config).")
@click.option("--config-set", "config_sets", multiple=True, callback=_config_sets, metavar="KEY=VALUE",
              help="With --against hf:ModelClass: set a config key, or a constructor argument such as "
                   "add_pooling_layer=false (repeatable).")
@click.option("--output-field", "output_field", metavar="NAME", default=None,
              help="With --against: the output of the real model that the spec's output is (a field of a "
                   "transformers output such as pooler_output, or a tuple index); default: its first tensor.")
def validate_command(spec, batch, sets, pass_, device, rtol, fmt, quiet, force, against, config, config_sets,
                     output_field):
    """Build SPEC's torch module (or, with --against, your real model), count it, and compare per layer;
    exit 1 on any mismatch. Without --against this checks the engine against itself, not your model."""
    from costspec.core.progress import status
    from costspec.core.render import render
    from costspec.model import load

    model = load(spec)
    values = model.bind(batch, sets)
    if against is None:
        options.require(config is None and not config_sets, "--config and --config-set need --against hf:ModelClass")
        options.require(output_field is None, "--output-field needs --against")
        from costspec.runtime.validate import check, to_result, validate

        with status(f"validate: building and counting {model.name} ({pass_}, {device})", quiet):
            result = validate(model, values, pass_, device, rtol, force)
        click.echo(render(to_result(result), fmt))
        check(result)
        return
    from costspec.against.check import check as check_against
    from costspec.against.check import validate_against
    from costspec.against.report import to_result as against_result
    from costspec.against.target import load_target

    with status(f"validate: counting {against} against {model.name} ({pass_}, {device})", quiet):
        target = load_target(against, model, values, device, config, config_sets, output_field)
        outcome = validate_against(model, values, target, pass_, device, rtol)
    click.echo(render(against_result(outcome), fmt))
    check_against(outcome)
