"""Activations saved for backward under activation checkpointing: a checkpointed part keeps only its input
(torch.utils.checkpoint, non-reentrant), charged to its entry op; its internals are saved again in the
recompute (memory's `recomputed` kind). The spec's count against saved_tensors_hooks on the generated module
running torch.utils.checkpoint, per op row, on toy specs and on the zoo's vit_b at small dims."""
from __future__ import annotations

import json

import pytest
import sympy

torch = pytest.importorskip("torch")

import costspec  # noqa: E402
from costspec.analysis.memory import ACTIVATIONS, RECOMPUTED, memory_kinds  # noqa: E402
from costspec.model import load  # noqa: E402
from costspec.runtime.saved_bytes import compare_saved, measure_saved  # noqa: E402
from costspec.tree.saved import recomputed_bytes, saved_bytes, saved_total  # noqa: E402
from costspec.tree.walk import MODEL_SLOT  # noqa: E402
from tests.common import ROOT, invoke  # noqa: E402
from tests.tree.test_checkpoint import SPEC as CHECKPOINT_SPEC  # noqa: E402
from tests.zoo.test_saved_bytes import BACKENDS, DTYPES, SMALL  # noqa: E402

# the tree's checkpointing spec at fp32 (saved bytes per element)
SPEC = CHECKPOINT_SPEC.replace("name: ck\n", "name: ck\nprecision: {{dtype: fp32}}\n", 1)
VIT = dict(B=2, img=32, C=32, heads=2, L=3)


def values(model, **at) -> dict:
    return dict(model.bind(sets=at))


def evaluated(rows: dict, at: dict) -> dict[str, int]:
    return {row: int(amount.xreplace(at)) for row, amount in rows.items()}


def test_a_checkpointed_repeat_keeps_each_instance_input_only():
    model = costspec.loads(SPEC.format(L=3, extra="    checkpoint: true"))
    at = values(model)
    x = 2 * 4 * 8 * 4  # B x S x C fp32
    # the first linear keeps the model input; each block its input; the last layernorm its input and statistics
    assert evaluated(saved_bytes(model.root), at) == {"linear": x, "blocks.norm": 3 * x, "norm": x + 2 * 2 * 4 * 4}
    measured = measure_saved(model, at)
    assert measured.by_layer == {"linear": x, "blocks.norm": 3 * x, "norm": x + 64}
    assert MODEL_SLOT not in measured.by_layer
    # recomputed in backward: one block's internals (layernorm statistics, its output for fc1, fc1's output
    # for gelu, gelu's output for fc2), its input held already
    assert int(recomputed_bytes(model.root).xreplace(at)) == 2 * 2 * 4 * 4 + x + 4 * x + 4 * x


@pytest.mark.parametrize("every, L", [(2, 5), (3, 7), (2, 2)])
def test_every_n_th_instance_and_instances_saving_their_own_output(every, L):
    """toy_mlp's instances end in a sigmoid, which keeps its output: a plain instance's output is counted there,
    and the instance after it (checkpointed or not) keeps nothing new for it."""
    model = load(ROOT / "specs" / "toy_mlp.yaml", checkpoint=f"every:{every}")
    at = values(model, M=4, D=8, N=L)
    comparison = compare_saved(model, at)
    assert not comparison.failures(), comparison.failures()
    x = 4 * 8 * 4
    expected = x  # instance 0 (checkpointed) keeps the model input
    for i in range(1, L):
        after_checkpointed = (i - 1) % every == 0  # else its input is counted at the sigmoid before
        expected += (x if after_checkpointed else 0) + (x if i % every else 0)  # its input; a sigmoid's output
    assert sum(a for _, a, _ in comparison.rows) == expected


def test_a_checkpointed_block_use_and_an_input_without_gradient():
    """torch.utils.checkpoint saves its argument even when nothing in the block is differentiated."""
    text = """
costspec: 1
name: first
precision: {dtype: fp32}
dims: {B: 2, C: 8}
input: [B, C]
blocks:
  act: [{activation: {fn: gelu}}, {scale: {by: 2}}]
layers:
  - block: act
    checkpoint: true
  - linear: {out: C}
"""
    model = costspec.loads(text)
    at = values(model)
    comparison = compare_saved(model, at)
    assert not comparison.failures(), comparison.failures()
    assert evaluated(saved_bytes(model.root), at) == {"act.act": 2 * 8 * 4, "linear": 2 * 8 * 4}


@pytest.mark.parametrize("setting", ["blocks", "every:2"])
@pytest.mark.parametrize("backend", ["flash", "math"])
def test_vit_b_per_layer(setting, backend):
    model = load(ROOT / "specs" / "vit_b.yaml", backend=backend, checkpoint=setting)
    comparison = compare_saved(model, model.bind(sets=VIT))
    assert not comparison.failures(), comparison.failures()
    assert MODEL_SLOT not in {row for row, _, _ in comparison.rows}
    plain = load(ROOT / "specs" / "vit_b.yaml", backend=backend)
    at = plain.bind(sets=VIT)
    assert sum(a for _, a, _ in comparison.rows) < int(saved_total(saved_bytes(plain.root)).xreplace(at))


def test_validate_saved_bytes_with_checkpoint_blocks_on_the_cli():
    r = invoke("validate", str(ROOT / "specs" / "vit_b.yaml"), "--pass", "train", "--saved-bytes",
                "--checkpoint", "blocks", "--format", "json", *[f"--set={k}={v}" for k, v in VIT.items()])
    assert r.returncode == 0, r.stdout + r.stderr
    saved = json.loads(r.stdout)["saved_for_backward"]
    assert saved and all(row["analytic"] == row["measured"] for row in saved)
    assert MODEL_SLOT not in {row["row"] for row in saved}


def test_memory_shows_the_reduced_activations_and_the_recompute():
    plain = load(ROOT / "specs" / "vit_b.yaml")
    ck = load(ROOT / "specs" / "vit_b.yaml", checkpoint="blocks")
    at = plain.bind(sets={"B": 8})
    kinds = {k.name: int(sympy.ceiling(k.bytes.xreplace(at))) for k in memory_kinds(ck, "train")}
    before = {k.name: int(k.bytes.xreplace(at)) for k in memory_kinds(plain, "train")}
    assert RECOMPUTED not in before
    B, S, C, L = 8, 197, 768, 12
    # every block keeps its input (bf16), once
    assert before[ACTIVATIONS] - kinds[ACTIVATIONS] > 10 * L * B * S * C * 2
    blocks = sum(a for row, a in evaluated(saved_bytes(ck.root), at).items() if row.startswith("blocks."))
    assert blocks == L * B * S * C * 2
    # one block's internals: what a plain block instance saves, but its input
    one = load(ROOT / "specs" / "vit_b.yaml")
    one_at = one.bind(sets={"B": 8, "L": 1})
    inner = sum(a for row, a in evaluated(saved_bytes(one.root), one_at).items() if row.startswith("blocks."))
    assert kinds[RECOMPUTED] == inner - B * S * C * 2
    r = invoke("memory", str(ROOT / "specs" / "vit_b.yaml"), "--pass", "train", "--checkpoint", "blocks",
                "--batch", "8", "--format", "json")
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)["kinds"]
    assert shown[ACTIVATIONS]["bytes"] == kinds[ACTIVATIONS] and shown[RECOMPUTED]["bytes"] == kinds[RECOMPUTED]


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["blocks", "every:2"])
@pytest.mark.parametrize("spec", sorted(SMALL))
def test_every_modelled_zoo_spec_checkpointed(spec, setting):
    """The zoo at small dims (vit_b's fast variant above), both kernels."""
    for backend in BACKENDS.get(spec, ("flash", "math")):
        model = load(ROOT / "specs" / f"{spec}.yaml", dtype=DTYPES.get(spec), backend=backend, checkpoint=setting)
        comparison = compare_saved(model, model.bind(sets=SMALL[spec]))
        assert not comparison.failures(), (backend, comparison.failures())
