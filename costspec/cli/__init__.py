"""The `costspec` command line: a click group; each command lives in its own small module.

Only this module maps errors to exit codes: 2 for bad input or usage, 1 for a validation
mismatch, 3 for an internal error (a bug: please report it).
"""
from __future__ import annotations

import os
import sys

import click

from costspec.core.errors import CostspecError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="costspec")
def cli() -> None:
    """Exact symbolic Tensor-Core / CUDA-core costs of neural networks from a YAML spec."""


def _register() -> None:
    # Explicit list (no discovery). Commands that need torch import it inside the command.
    from costspec.cli import (  # noqa: F401
        check,
        eval_cmd,
        formula_cmd,
        gpus_cmd,
        latex_cmd,
        ncu_cmd,
        roofline_cmd,
        sweep_cmd,
        time_cmd,
        torch_cmd,
        validate_cmd,
    )
    from costspec.cli import init_cmd, report_cmd, zoo_cmd  # noqa: F401  (issue 18)
    from costspec.cli import import_cmd  # noqa: F401  (issue 15)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI and turn errors into one line and an exit code."""
    _register()
    try:
        cli.main(args=argv, prog_name="costspec", standalone_mode=False)
    except CostspecError as exc:
        click.echo(f"costspec: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except OSError as exc:  # e.g. -o into a folder that does not exist
        where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
        click.echo(f"costspec: error: {exc.strerror or exc}{where}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # a bug in costspec: say so, no traceback unless asked
        if os.environ.get("COSTSPEC_DEBUG"):
            raise
        click.echo(f"costspec: internal error: {type(exc).__name__}: {exc}\n"
                   "This is a bug in costspec; please report it (set COSTSPEC_DEBUG=1 for a traceback).", err=True)
        sys.exit(3)
