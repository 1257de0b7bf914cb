"""The `costspec` command line: a click group; each command lives in its own small module.

Only this module maps errors to exit codes: 2 for bad input or usage, 1 for a validation
mismatch, 3 for an internal error (a bug: please report it).
"""
from __future__ import annotations

import os
import sys
from importlib import import_module

import click

from costspec.core.errors import CostspecError

# command name -> its module in costspec.cli (explicit, no discovery). A command's module is imported
# only when that command runs (or when help lists them all), so `costspec eval` never imports
# the modules of validate, torch or time, and those import torch only inside their commands.
COMMANDS = {
    "check": "check", "eval": "eval_cmd", "formula": "formula_cmd", "gpus": "gpus_cmd", "import": "import_cmd",
    "init": "init_cmd", "latex": "latex_cmd", "memory": "memory_cmd",
    "ncu": "ncu_cmd", "report": "report_cmd", "roofline": "roofline_cmd",
    "sweep": "sweep_cmd", "time": "time_cmd", "torch": "torch_cmd", "validate": "validate_cmd", "zoo": "zoo_cmd",
}


class LazyGroup(click.Group):
    """A click group that imports a command's module the first time the command is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            import_module(f"costspec.cli.{COMMANDS[cmd_name]}")
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="costspec")
def cli() -> None:
    """Exact symbolic Tensor-Core / CUDA-core costs of neural networks from a YAML spec."""


def register_all() -> None:
    """Import every command's module (for tools that walk the whole command tree, e.g. the docs)."""
    for name in COMMANDS:
        cli.get_command(click.Context(cli), name)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI and turn errors into one line and an exit code."""
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
