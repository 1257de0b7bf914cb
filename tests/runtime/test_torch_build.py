"""Spec -> torch module: module paths are the dotted layer names, repeats are ModuleLists whose
instances use their variant group's body, the module runs on real data, and torch stays an
optional import."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import costspec
from costspec.core.errors import MissingExtraError, SpecError

torch = pytest.importorskip("torch")

from costspec.core.render import render  # noqa: E402
from costspec.runtime.torch_build import build_module, describe, import_torch, row_names  # noqa: E402
from costspec.tree.walk import row_name  # noqa: E402

TINY_VIT = textwrap.dedent("""\
    costspec: 1
    name: tiny_vit
    dims:
      B: 2
      img: 8
      patch: 4
      C: 8
      heads: 2
      L: 3
      S: (img // patch)**2 + 1
    input: [B, 3, img, img]
    blocks:
      encoder_block:
        params: {hid: 16}
        layers:
          - residual:
              - layernorm: {}
              - attention: {heads: heads}
          - residual:
              - layernorm: {}
              - mlp: {hidden: hid, fn: gelu}
    layers:
      - patch_embed: {patch: patch, dim: C, cls_token: true, pos_embed: true}
      - repeat: L
        name: blocks
        body: encoder_block
        at:
          - {indices: [1], name: wide, args: {hid: 32}}
      - layernorm: {}
    """)


def _build(text=TINY_VIT, **dims):
    model = costspec.loads(text)
    module, make_input = model.to_torch(**dims)
    return model, module, make_input


def test_paths_are_layer_names():
    _, module, _ = _build()
    paths = {p for p, _ in module.named_modules()}
    for path in ("patch_embed.proj", "blocks.0.norm1", "blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.0.add1",
                 "blocks.1.mlp.fc1", "blocks.2.mlp.fc2", "blocks.2.add2", "norm"):
        assert path in paths
    assert isinstance(module.blocks, torch.nn.ModuleList) and len(module.blocks) == 3


def test_variant_group_bodies_and_row_names():
    model, module, _ = _build()
    assert [b.mlp.fc1.out_features for b in module.blocks] == [16, 32, 16]  # index 1 is in the `wide` group
    assert row_name(model.root, "blocks.1.mlp.fc1") == "blocks[wide].mlp.fc1"
    assert row_name(model.root, "blocks.2.attn.qkv") == "blocks[others].attn.qkv"
    assert row_name(model.root, "patch_embed.proj") == "patch_embed.proj"
    assert row_name(model.root, "blocks.0.attn") == "blocks[others].attn"
    names = row_names(model, module)
    assert names[""] == "" and names["blocks.1"] == "blocks[wide]"
    report_rows = {r.name for r in model.evaluate().rows}
    assert set(names.values()) - {""} <= report_rows | {"blocks"}


def test_row_names_without_variants():
    model = costspec.load("specs/vit_b.yaml")
    assert row_name(model.root, "blocks.2.attn.qkv") == "blocks.attn.qkv"
    assert row_name(model.root, "blocks.11.mlp.act") == "blocks.mlp.act"


def test_runs_on_real_data_and_counts_parameters():
    model, module, make_input = _build()
    x = make_input("cpu")
    assert tuple(x.shape) == (2, 3, 8, 8) and x.dtype == torch.float32 and not x.requires_grad
    y = module(x)
    assert tuple(y.shape) == (2, 5, 8)  # [B, S, C]
    assert torch.isfinite(y).all()
    y.float().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in module.parameters())
    assert sum(p.numel() for p in module.parameters()) == model.evaluate().params


def test_meta_build_and_dtype():
    model = costspec.loads(TINY_VIT)
    with torch.device("meta"):
        module, make_input = build_module(model, model.bind(batch=4))
    x = make_input("meta", torch.bfloat16)
    assert x.is_meta and x.dtype == torch.bfloat16 and tuple(x.shape) == (4, 3, 8, 8)
    assert tuple(module.to(torch.bfloat16)(x).shape) == (4, 5, 8)


def test_reshape_that_changes_the_leading_dim():
    text = textwrap.dedent("""\
        costspec: 1
        name: r
        dims: {B: 2, S: 3, C: 4}
        input: [B, S, C]
        layers:
          - reshape: {shape: [B*S, C]}
          - linear: {out: 5}
          - reshape: {shape: [B, -1]}
        """)
    _, module, make_input = _build(text)
    assert tuple(module(make_input()).shape) == (2, 15)


def test_layer_name_clashing_with_module_attribute():
    text = textwrap.dedent("""\
        costspec: 1
        name: clash
        input: [2, 4]
        layers:
          - linear: {out: 4}
            name: training
        """)
    with pytest.raises(SpecError, match="clashes with an attribute"):
        _build(text)


def test_describe_lists_paths_and_parameter_counts():
    _, module, _ = _build()
    text = render(describe(module))
    assert "qkv" in text and "Linear" in text and "PatchEmbed" in text
    assert f"{sum(p.numel() for p in module.parameters()):,}" in text.splitlines()[2]


@pytest.mark.slow
def test_torch_command(tmp_path):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY_VIT)
    out = subprocess.run([sys.executable, "-m", "costspec", "torch", str(spec), "--batch", "2", "--depth", "2"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "patch_embed" in out.stdout and "proj" in out.stdout and "Conv2d" in out.stdout


def test_missing_torch_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    with pytest.raises(MissingExtraError, match=r"pip install torch \(or pip install '\.\[torch\]' in a costspec checkout\)"):
        import_torch("costspec validate")


@pytest.mark.parametrize("command", [["eval", "specs/vit_b.yaml", "--batch", "8"],
                                     ["eval", "specs/toy_mlp.yaml", "--pass", "backward", "--format", "json"],
                                     ["check", "specs/vit_b.yaml"]])
def test_eval_and_check_do_not_import_torch(command):
    code = ("import sys\nfrom costspec.cli import main\ntry:\n    main(%r)\nexcept SystemExit as e:\n"
            "    assert not e.code, e.code\nprint('TORCH' if 'torch' in sys.modules else 'NO-TORCH')" % command)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "NO-TORCH"
