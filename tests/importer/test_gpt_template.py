"""The GPT-like template (costspec/importer/families/gpt_template.py, driven by its per-family table): GPT-2,
GPT-NeoX, GPT-J, Falcon, BLOOM and OPT are one build. Folding their own modules into it changed no number:
tests/data/gpt_like_totals.json holds the TC and CUDA-core FLOPs and the parameters (batch 1 and 2; forward,
backward, train; whole causal LM and --backbone) that the modules before the fold wrote for the configs below
(`python -m tests.importer.test_gpt_template OUT.json` with that tree on PYTHONPATH wrote them), and the template
writes the same. Then the table itself: every GPT-like family a row, and the block layout and top-level layers
each config's switches select."""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from costspec.importer import FAMILIES, import_hf
from costspec.model import loads

transformers = pytest.importorskip("transformers")

DATA = Path(__file__).resolve().parents[1] / "data" / "gpt_like_totals.json"
FALCON = {"hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 64,
          "max_position_embeddings": 64}
GPTJ = {"n_embd": 32, "n_head": 4, "n_layer": 2, "vocab_size": 64, "n_positions": 64, "rotary_dim": 4}
BLOOM = {"hidden_size": 32, "n_head": 4, "n_layer": 2, "vocab_size": 64}
OPT = {"hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2, "ffn_dim": 48, "vocab_size": 64,
       "max_position_embeddings": 64}
NEOX = {"hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 48,
        "vocab_size": 64, "max_position_embeddings": 64}
GPT2 = {"n_embd": 32, "n_head": 4, "n_layer": 2, "vocab_size": 64, "n_positions": 64}
CASES = {
    # Falcon-7B-like: multi-query attention and MLP in parallel on one LayerNorm, no biases, tied head
    "falcon_7b": ("FalconConfig", {**FALCON, "multi_query": True, "parallel_attn": True}),
    # Falcon-40B-like: new_decoder_architecture, grouped key/value heads, two LayerNorms per block
    "falcon_40b": ("FalconConfig", {**FALCON, "new_decoder_architecture": True, "num_kv_heads": 2}),
    "falcon_40b_one_ln": ("FalconConfig", {**FALCON, "new_decoder_architecture": True, "num_kv_heads": 2,
                                           "num_ln_in_parallel_attn": 1, "tie_word_embeddings": False}),
    # Falcon-RW-like: ALiBi, sequential pre-LN blocks, full multi-head attention, biases
    "falcon_rw": ("FalconConfig", {**FALCON, "alibi": True, "parallel_attn": False, "multi_query": False,
                                   "bias": True}),
    "falcon_mha_parallel": ("FalconConfig", {**FALCON, "multi_query": False, "activation": "relu"}),
    "gptj": ("GPTJConfig", GPTJ),
    "gptj_relu_tied": ("GPTJConfig", {**GPTJ, "rotary_dim": 8, "activation_function": "relu",
                                      "tie_word_embeddings": True, "n_inner": 48}),
    "bloom": ("BloomConfig", BLOOM),
    "bloom_post_ln_untied": ("BloomConfig", {**BLOOM, "apply_residual_connection_post_layernorm": True,
                                             "tie_word_embeddings": False}),
    "opt_125m": ("OPTConfig", OPT),
    # OPT-350m-like: embeddings narrower than the hidden size (project_in/out), post-LN blocks
    "opt_350m": ("OPTConfig", {**OPT, "word_embed_proj_dim": 16, "do_layer_norm_before": False}),
    "opt_bare": ("OPTConfig", {**OPT, "enable_bias": False, "layer_norm_elementwise_affine": False,
                               "activation_function": "gelu_new", "_remove_final_layer_norm": True,
                               "tie_word_embeddings": False}),
    "neox": ("GPTNeoXConfig", NEOX),
    "neox_sequential": ("GPTNeoXConfig", {**NEOX, "use_parallel_residual": False, "attention_bias": False,
                                          "hidden_act": "gelu_new", "tie_word_embeddings": True}),
    "gpt2": ("GPT2Config", GPT2),
    "gpt2_switches": ("GPT2Config", {**GPT2, "scale_attn_by_inverse_layer_idx": True,
                                     "reorder_and_upcast_attn": True, "n_inner": 48, "scale_attn_weights": False,
                                     "activation_function": "relu", "tie_word_embeddings": False}),
}
PASSES = ("forward", "backward", "train")


def totals(name: str, folder: Path, backbone: bool) -> dict[str, list[int]]:
    """{"pass/batch": [TC FLOPs, CUDA-core FLOPs, parameters]} of the import of CASES[name], batch 1 and 2."""
    cls, keys = CASES[name]
    path = folder / f"{name}.json"
    path.write_text(json.dumps(getattr(transformers, cls)(**keys).to_dict(), default=str))
    model = loads(import_hf(path, backbone=backbone).text)
    out = {}
    for batch in (1, 2):
        for pass_ in PASSES:
            r = model.report(pass_, model.bind(batch))
            out[f"{pass_}/{batch}"] = [int(r.tc), int(r.cuda), int(r.params)]
    return out


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("backbone", [False, True], ids=["whole", "backbone"])
def test_the_fold_changed_no_number(name, backbone, tmp_path):
    before = json.loads(DATA.read_text())
    assert totals(name, tmp_path, backbone) == before[f"{name}/{backbone}"], (name, backbone)


def test_every_gpt_like_family_is_a_table_row():
    from costspec.importer.families.gpt_table import GPT_LIKE

    assert {t.model_type for t in GPT_LIKE} == {"gpt2", "gpt_neox", "gptj", "falcon", "bloom", "opt"}
    for t in GPT_LIKE:
        family = FAMILIES[t.model_type]
        assert family.doc == t.blurb and family.refused == t.refused and family.lm == t.lm
        assert family.hf_class == (t.lm.whole if t.lm else t.hf_class)


def shape(block: list[dict]) -> list[str]:
    """The block's items by their op (a residual or parallel by what it holds first)."""
    out = []
    for entry in block:
        op = next(iter(entry))
        if op == "residual":
            inner = next(iter(entry["residual"][0]))
            op = f"residual({'parallel' if any('parallel' in x for x in entry['residual']) else inner})"
        elif op == "parallel":
            op = f"parallel({len(entry['parallel']['branches'])})"
        out.append(op)
    return out


LAYOUTS = {
    "falcon_7b": ["residual(parallel)"], "falcon_40b": ["parallel(3)"], "falcon_40b_one_ln": ["residual(parallel)"],
    "falcon_rw": ["residual(layernorm)"] * 2, "falcon_mha_parallel": ["residual(parallel)"],
    "gptj": ["residual(parallel)"], "bloom": ["residual(layernorm)"] * 2,
    "bloom_post_ln_untied": ["layernorm", "residual(attention)", "layernorm", "residual(mlp)"],
    "opt_125m": ["residual(layernorm)"] * 2, "opt_350m": ["residual(attention)", "layernorm", "residual(linear)",
                                                         "layernorm"],
    "neox": ["parallel(3)"], "neox_sequential": ["residual(layernorm)"] * 2, "gpt2": ["residual(layernorm)"] * 2,
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_each_switch_selects_its_layout(name, tmp_path):
    """The block layout each config selects: parallel on one LayerNorm (Falcon-7B, GPT-J), parallel on two
    (Falcon-40B, NeoX's use_parallel_residual), pre-LN, post-LN (OPT-350m), the LayerNorm's output as residual
    (BLOOM's apply_residual_connection_post_layernorm); and the top-level extras each family's switches add."""
    cls, keys = CASES[name]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(getattr(transformers, cls)(**keys).to_dict(), default=str))
    spec = yaml.safe_load(import_hf(path).text)
    (block,) = spec["blocks"].values()
    assert shape(block) == LAYOUTS[name]
    tops = [next(iter(entry)) for entry in spec["layers"]]
    extras = {"bloom": ["layernorm"], "opt_350m": ["linear", "position_embedding"], "opt_125m": ["position_embedding"],
              "gpt2": ["position_embedding"]}.get(name.removesuffix("_post_ln_untied"), [])
    final = ["layernorm"] if name != "opt_350m" else ["linear"]
    assert tops[:-2] == ["embedding", *extras, "repeat"] and tops[-2:-1] == final
    assert tops[-1] == "lm_head"  # the whole causal LM (GPT-NeoX's head added by importer/head.py)


if __name__ == "__main__":  # write the totals of the tree on PYTHONPATH (the data file, from the code before the fold)
    out = {}
    with tempfile.TemporaryDirectory() as scratch:
        for case in CASES:
            for bare in (False, True):
                out[f"{case}/{bare}"] = totals(case, Path(scratch), bare)
    lines = ",\n".join(f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(out.items()))
    Path(sys.argv[1]).write_text("{\n" + lines + "\n}\n")
