"""`costspec memory`: device memory by kind (weights, gradients, master weights, optimizer state, key/value
cache), each with its formula, and with --gpu whether it fits and the largest batch that does; with
--check, the training-step peak against PyTorch's MemTracker."""
from __future__ import annotations

from dataclasses import dataclass

import click

from costspec.cli import cli, options
from costspec.cli.options import Bindings, Serving


@dataclass(frozen=True)
class Training:
    """The step whose bytes are counted: --pass, --dtype, --optimizer, --master-weights, and --check (the
    training-step peak against PyTorch's MemTracker)."""

    pass_: str
    dtype: str | None
    optimizer: str
    master_weights: bool
    check: bool


training = options.option_group(
    "training", Training,
    click.option("--pass", "pass_", type=click.Choice(["forward", "train"]), default="forward", show_default=True,
                 help="forward: the weights (and the cache of a served decoder); train: also gradients and "
                      "optimizer state."),
    options.dtype,
    click.option("--optimizer", type=click.Choice(["sgd", "adam", "adamw", "adafactor", "adam8bit"]), default="adamw",
                 show_default=True,
                 help="Whose state --pass train counts (sgd: none; adam, adamw: two moments per parameter; "
                      "adafactor: factored fp32 second moments; adam8bit: two 8-bit moments with block scales; "
                      "the last two read each parameter tensor's shape from the generated module: need torch)."),
    click.option("--master-weights", is_flag=True,
                 help="Mixed precision: an fp32 copy of the low-precision weights; the optimizer state in fp32."),
    click.option("--check", is_flag=True,
                 help="With --pass train (needs torch): run one training step of the generated module under "
                      "PyTorch's MemTracker (FakeTensorMode, nothing allocated) and compare its peak and its "
                      "categories with the modelled ones (with --checkpoint, also the moment a checkpointed "
                      "block's forward has been re-run); exit 1 when the peak differs by more than 5% or that "
                      "moment in a category without a named rule."))


@cli.command("memory")
@options.spec_arg
@options.bindings
@training
@options.serving
@click.option("--gpu", default=None, metavar="NAME",
              help="A GPU from `costspec gpus`, e.g. h100-sxm: its capacity, whether the total fits, and the "
                   "largest batch (and context) that does.")
@options.catalog
@options.output_format()
def memory_command(spec: str, dims: Bindings, training: Training, serving: Serving, gpu: str | None,
                   catalog: str | None, fmt: str):
    """Bytes SPEC holds on the device, by kind, each with its formula; with --gpu, the fit."""
    from costspec.analysis.memory import memory_kinds, memory_result
    from costspec.core.render import render

    options.require(serving.phase is None or training.pass_ == "forward",
                    f"--phase {serving.phase} serves a model: it runs forward only (drop --pass {training.pass_})")
    options.require(not training.check or training.pass_ == "train",
                    "--check compares a training step's peak: it needs --pass train")
    model = serving.load(spec, training.dtype)
    values = dims.bind(model)
    if training.check:
        from costspec.runtime.mem_tracker import check_memory, check_result, passed

        checks = check_memory(model, values, training.optimizer, training.master_weights)
        click.echo(render(check_result(model, values, checks), fmt))
        raise SystemExit(0 if passed(checks) else 1)
    tensors = None
    if training.pass_ == "train" and training.optimizer in ("adafactor", "adam8bit"):
        from costspec.runtime.param_tensors import parameter_tensors

        tensors = parameter_tensors(model, values)
    kinds = memory_kinds(model, training.pass_, training.optimizer, training.master_weights,
                         cache=model.phase is not None, tensors=tensors)
    device = options.Hardware(gpu, catalog).device()
    click.echo(render(memory_result(model, kinds, values, training.pass_, device), fmt))
