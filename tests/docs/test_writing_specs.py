"""docs/writing-specs.md cannot rot: every full spec in it (a ```yaml block starting with `costspec: 1`)
loads as `costspec check` loads it, evaluates at its defaults, matches the eval output pasted under it,
and validates forward and train against its generated module on meta (at two layers and 64 tokens
where the spec has those dims, as the guide's own validate commands bind them)."""
from __future__ import annotations

import re
import shlex

import pytest

import costspec
from costspec.cli import main as cli_main
from tests.common import ROOT

GUIDE = ROOT / "docs" / "writing-specs.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
EVAL_PROMPT = "$ PYTHONPATH=$PWD python -m costspec eval "


def _blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(GUIDE.read_text(encoding="utf-8"))]


def _full_specs() -> list[tuple[str, str, str | None]]:
    """(name, spec text, the eval transcript pasted right after it or None), in the guide's order."""
    blocks = _blocks()
    out = []
    for i, (lang, text) in enumerate(blocks):
        if lang != "yaml" or not text.startswith("costspec: 1\n"):
            continue
        name = re.search(r"^name: (\w+)$", text, re.M)
        assert name, "a full spec in the guide has a name"
        following = blocks[i + 1][1] if i + 1 < len(blocks) else ""
        out.append((name.group(1), text, following if following.startswith(EVAL_PROMPT) else None))
    return out


SPECS = _full_specs()
IDS = [name for name, _, _ in SPECS]


def test_the_guide_works_five_models_end_to_end():
    # a CNN, an encoder, a decoder LLM, an MoE and an encoder-decoder, each with its eval output shown
    assert IDS == ["se_resnet_stage1", "bert_base_encoder", "llama_style_1b", "mixtral_style_moe", "encoder_decoder"]
    assert all(transcript for _, _, transcript in SPECS)


@pytest.mark.parametrize("text", [t for _, t, _ in SPECS], ids=IDS)
def test_every_full_spec_checks_and_evaluates_at_its_defaults(text):
    model = costspec.loads(text, file="writing-specs.md")
    assert model.problems(model.bind()) == []
    forward, train = model.evaluate("forward"), model.evaluate("train")
    assert forward.params == train.params > 0
    assert 0 < forward.tc < train.tc and 0 < forward.cuda < train.cuda  # train = forward + backward


@pytest.mark.parametrize("name,text,transcript", [s for s in SPECS if s[2]], ids=[s[0] for s in SPECS if s[2]])
def test_the_pasted_eval_output_is_what_eval_prints(name, text, transcript, tmp_path, capsys):
    command, *pasted = transcript.splitlines()
    args = shlex.split(command[len(EVAL_PROMPT):])
    spec = tmp_path / args[0]
    spec.write_text(text, encoding="utf-8")
    capsys.readouterr()
    cli_main(["eval", str(spec), *args[1:]])
    printed = capsys.readouterr().out.splitlines()
    # the table, from its title line to the total (notes after it may be trimmed in the guide)
    table = pasted[:next(i for i, line in enumerate(pasted) if line.startswith("total ")) + 1]
    assert table[0].startswith(name + " | ")
    assert printed[:len(table)] == table


def _small(model) -> dict[str, int]:
    """Two layers and 64 tokens where the spec has free dims L and S (the guide's validate commands)."""
    free = {d.name for d in model.dims.free()}
    return {k: v for k, v in {"L": 2, "S": 64}.items() if k in free}


@pytest.mark.parametrize("pass_", ["forward", "train"])
@pytest.mark.parametrize("text", [t for _, t, _ in SPECS], ids=IDS)
def test_every_full_spec_validates_against_its_generated_module(text, pass_):
    pytest.importorskip("torch")
    from costspec.runtime.validate import validate

    model = costspec.loads(text, file="writing-specs.md")
    result = validate(model, model.bind(sets=_small(model)), pass_)
    assert result.ok, result.failures()


# The cookbook's fragments (```yaml blocks that are not full specs), each checked and validated inside a
# small spec: its dims and input, keyed by a string only that fragment holds. A new fragment needs a
# context here, so none goes unchecked.
FRAGMENT_CONTEXTS = {
    "params: {window: 4096}": "dims: {B: 1, S: 32, C: 32, heads: 4, F: 64, L: 12}\ninput: [B, S, C]\n",
    "x + attn(ln1(x)) + mlp(ln2(x))": "dims: {B: 1, S: 16, C: 32, heads: 4, F: 128}\ninput: [B, S, C]\n",
    "shortcut:": "dims: {B: 1, C: 8, H: 8}\ninput: [B, C, H, H]\n",
    "join: mul": "dims: {B: 1, C: 32, H: 8}\ninput: [B, C, H, H]\n",
    "save: skip1": "dims: {B: 1, H: 16}\ninput: [B, 3, H, H]\n",
    "{layer_scale: {}}": "dims: {B: 1, S: 16, C: 32}\ninput: [B, S, C]\n",
    "{layer_scale: {axis: 1}}": "dims: {B: 1, C: 32, H: 8}\ninput: [B, C, H, H]\n",
    "queries: 1": "dims: {B: 1, S: 16, C: 32, heads: 4}\ninput: [B, S, C]\n",
    "kv: enc, fused_qkv": "dims: {B: 1, S: 16, T: 8, C: 32, heads: 4}\n",
    "sliding_window: 16": "dims: {B: 1, S: 64, C: 32, heads: 4, KV: 2}\ninput: [B, S, C]\n",
    "rel_bias: t5": "dims: {B: 1, S: 16, C: 32, heads: 4}\ninput: [B, S, C]\n",
    "swin_block": "dims: {B: 1, G: 14, C: 32, heads: 4}\n",
    "- attention: {heads: heads, kv_heads: KV}\n": "dims: {B: 1, S: 16, C: 64, heads: 8, KV: 8}\ninput: [B, S, C]\n",
    "scale: {by: sqrt(C)}": "dims: {B: 1, S: 16, C: 32, V: 100}\n",
    "conv1d": "dims: {B: 1, mels: 80, frames: 300, C: 64}\n",
    "conv3d": "dims: {B: 1, T: 4, img: 32, C: 64}\n",
    "shared_experts: 2": "dims: {B: 1, S: 16, C: 64, E: 16, F: 32}\ninput: [B, S, C]\n",
    "mamba_block": "dims: {B: 1, S: 8, C: 32, L: 2, V: 100}\n",
    "mamba2:": "dims: {B: 1, S: 12, C: 32}\ninput: [B, S, C]\n",
    # Mixture-of-experts routers and activations
    "score_bias: true": "dims: {B: 1, S: 8, C: 32, E: 16, F: 16}\ninput: [B, S, C]\n",
    "renorm: false}   # OLMoE": "dims: {B: 1, S: 8, C: 32, E: 16, F: 16}\ninput: [B, S, C]\n",
    "swiglu_limit: 7.0": "dims: {B: 1, S: 8, C: 32, E: 8, F: 16}\ninput: [B, S, C]\n",
    "fn: relu6": "dims: {B: 1, C: 16, H: 15}\ninput: [B, C, H, H]\n",
    "fn: squared_relu": "dims: {B: 1, S: 8, C: 32, F: 64}\ninput: [B, S, C]\n",
    "fn: gelu_new": "dims: {B: 1, S: 8, C: 32}\ninput: [B, S, C]\n",
    "fn: my_act": "dims: {B: 1, S: 8, C: 32, F: 64}\ninput: [B, S, C]\n",
    # the attention variants
    "v_head_dim: DV, causal: true}": "dims: {B: 1, S: 16, C: 64, heads: 4, RQ: 24, R: 16, DN: 8, DR: 4, DV: 8}\n"
                                     "input: [B, S, C]\n",
    "absorb: true": "dims: {B: 1, S: 16, C: 64, heads: 4, RQ: 24, R: 16, DN: 8, DR: 4, DV: 8}\ninput: [B, S, C]\n",
    "softcap: 50.0": "dims: {B: 1, S: 16, C: 64, heads: 4, KV: 2, F: 96}\ninput: [B, S, C]\n",
    "scale: {by: 1/30}": "dims: {B: 1, S: 16, C: 32, V: 100}\ninput: [B, S]\n",
    "sinks: true": "dims: {B: 1, S: 16, C: 64, heads: 4, KV: 2}\ninput: [B, S, C]\n",
    "rope: true, causal: true, qk_norm: rmsnorm}": "dims: {B: 1, S: 16, C: 64, heads: 4, KV: 2}\ninput: [B, S, C]\n",
    "qk_norm_over: all": "dims: {B: 1, S: 16, C: 64, heads: 4, KV: 2, F: 96}\ninput: [B, S, C]\n",
    "qk_norm_weight: per_head": "dims: {B: 1, S: 16, C: 64, heads: 4, KV: 2}\ninput: [B, S, C]\n",
    "kv: mem, rope": "dims: {B: 1, S: 16, T: 8, C: 32, heads: 4}\n",
    "disentangled_attention": "dims: {B: 1, S: 16, C: 32, heads: 4, K: 8, L: 2}\ninput: [B, S, C]\n",
    "local_window: local": "dims: {B: 1, S: 32, C: 32, heads: 4, F: 48, L: 22, LW: 8}\ninput: [B, S, C]\n",
    "C, tied: true}   # the decoder's lookup": "dims: {B: 2, S: 8, T: 6, C: 32, V: 50}\ninput: [B, S]\n"
                                                 "inputs:\n  dec: [B, T]\n",
    "learned_tokens: {count: det, at: end}": "dims: {B: 2, img: 32, C: 16, det: 5}\ninput: [B, 3, img, img]\n",
    "native: skip": "dims: {B: 2, img: 42, C: 16}\ninput: [B, 3, img, img]\n",
    "tables: L - 1": "dims: {B: 2, C: 16, gh: 2, gw: 3, h: 3, w: 4, det: 5, L: 3}\ninput: [B, 1 + h*w + det, C]\n",
    "ceil_mode: true": "dims: {B: 2, C: 16}\ninput: [B, C, 7, 7]\n",
    "each use of the block saves its own x": "dims: {B: 2, C: 16, H: 8}\ninput: [B, C, H, H]\n",
    "weights: int4, group: 128": "dims: {B: 2, S: 8, C: 256, V: 100}\ninput: [B, S, C]\n",
    "checkpoint: {every: 2}": "dims: {B: 1, S: 16, C: 32, heads: 4, L: 4}\ninput: [B, S, C]\n",
    "lora: 16": "dims: {B: 2, S: 8, C: 128, heads: 4, F: 192}\ninput: [B, S, C]\n",
}
# fragments the torch build refuses (an activation the spec's costs: declare has no torch module): the message
REFUSED_BY_TORCH = {"fn: my_act": "has no torch module"}


def _fragments() -> list[str]:
    return [text for lang, text in _blocks() if lang == "yaml" and not text.startswith("costspec: 1\n")]


def _in_context(fragment: str) -> str:
    keys = [k for k in FRAGMENT_CONTEXTS if k in fragment]
    assert len(keys) == 1, f"no single context for the guide's fragment:\n{fragment}"
    body = "layers:\n" + fragment if fragment.startswith("- ") else fragment
    return "costspec: 1\nname: fragment\n" + FRAGMENT_CONTEXTS[keys[0]] + body


def test_every_cookbook_fragment_has_a_context():
    fragments = _fragments()
    assert len(fragments) == len(FRAGMENT_CONTEXTS)
    for fragment in fragments:
        _in_context(fragment)


@pytest.mark.parametrize("pass_", ["forward", "train"])
@pytest.mark.parametrize("fragment", _fragments(), ids=lambda f: re.sub(r"\W+", "_", f.strip())[:40])
def test_every_cookbook_fragment_checks_and_validates(fragment, pass_):
    pytest.importorskip("torch")
    from costspec.runtime.validate import validate

    model = costspec.loads(_in_context(fragment), file="writing-specs.md")
    refused = [message for key, message in REFUSED_BY_TORCH.items() if key in fragment]
    if refused:
        from costspec.core.errors import SpecError

        with pytest.raises(SpecError, match=refused[0]):
            validate(model, model.bind(), pass_)
        return
    result = validate(model, model.bind(), pass_)
    assert result.ok, result.failures()
