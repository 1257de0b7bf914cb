"""The GPT-like decoder template: GPT-2, GPT-NeoX, GPT-J, Falcon, BLOOM and OPT as one build, each family a
table entry (`GptLike`: its config keys, its module paths, its defaults) and a reader of the switches its config
selects (`Layer`: the attention op, the block layout, the MLP, learned positions, an embedding LayerNorm,
embeddings projected in and out, the final LayerNorm, the head's bias, and the family's named differences
from transformers as `ignore:` rules).

The template writes what they share: the dims (B, S, hidden, heads, head dim, MLP width, layers, vocabulary),
the precision, the token embedding (with positions, LayerNorm or projection after it), the repeat of blocks in
one of five layouts (LAYOUTS), the final LayerNorm (and projection out) and the LM head, tied or not as
`tie_word_embeddings` says (a family whose CausalLM writes the backbone, GPT-NeoX, leaves the head to
importer/head.py). The Llama-like decoders have their own template (modern_template.py).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from costspec.importer.config import HFConfig, Key
from costspec.importer.emit import SpecText, wrap_comment
from costspec.importer.families import Family
from costspec.importer.families.common import GELU_NEW_NOTE, activation, check_divides
from costspec.importer.families.modern_template import DEFAULT_S, item, precision
from costspec.importer.head import CausalLM

# block layouts: (x + attn(ln1(x)) + mlp(ln1(x))), (x + attn(ln1(x)) + mlp(ln2(x))), pre-LN, post-LN
# (ln(x + f(x))), and BLOOM's apply_residual_connection_post_layernorm (y = ln(x); y + f(y))
PARALLEL_ONE_NORM = "parallel attention and MLP on one LayerNorm"
PARALLEL_TWO_NORMS = "parallel attention and MLP on two LayerNorms"
PRE_LN = "sequential pre-LN blocks"
POST_LN = "sequential post-LN blocks"
NORMED_RESIDUAL = "sequential blocks with the LayerNorm's output as residual"
LAYOUTS = (PARALLEL_ONE_NORM, PARALLEL_TWO_NORMS, PRE_LN, POST_LN, NORMED_RESIDUAL)


@dataclass(frozen=True)
class Keys:
    """Where a family's config holds the shared sizes. `width`: candidates, the first present wins (BLOOM's
    n_embed / hidden_size); `mlp`: the MLP width's key, None for none (then `mlp_ratio` x width, also when the
    key holds null; `mlp_ratio` None: the key is required); `positions`: the maximum length's candidates (the
    first present wins), () for none (ALiBi); `activation`: the activation's key, None when the family fixes
    it (`activation_default`); `defaults`: the values transformers' config class fills in for absent keys the
    family does not require."""

    width: tuple[str, ...]
    heads: str
    layers: str
    vocab: str = "vocab_size"
    mlp: str | None = None
    mlp_ratio: int | None = 4
    positions: tuple[str, ...] = ("max_position_embeddings",)
    positions_default: int = 2048
    activation: str | None = None
    activation_default: str = "gelu"
    defaults: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Paths:
    """A family's module names in the class its build writes: `root` (the backbone's attribute, "" when the
    build writes the backbone), the token embedding, the repeated blocks, the final LayerNorm, and inside a
    block the attention and the MLP."""

    root: str
    embed: str
    blocks: str
    final_norm: str
    attn: str
    mlp: str
    positions: str = ""
    embed_norm: str = ""
    project_in: str = ""
    project_out: str = ""

    def top(self, name: str) -> str:
        return f"{self.root}.{name}" if self.root else name


@dataclass(frozen=True)
class Sizes:
    """The shared sizes read by the template (C, heads, L, V, the MLP width F, the activation's `fn`)."""

    C: int
    heads: int
    L: int
    V: int
    F: int
    fn: str


@dataclass
class Layer:
    """What one config selects, read by the family's reader: the attention op, the layout and its LayerNorms'
    module names (one name for PARALLEL_ONE_NORM), the MLP as (op, module) items (None: one `mlp` op of width F
    with `mlp_bias`), the LayerNorm op, the family's own dims, named differences (`ignore`), notes, the doc's
    middle (`blocks`), the keys read elsewhere (`understood`) and the embedding-side switches."""

    attn: str
    layout: str
    norms: tuple[str, ...]
    ignore: str
    blocks: str
    mlp: tuple[tuple[str, str], ...] | None = None
    mlp_bias: bool = True
    norm: str = "layernorm: {}"
    dims: tuple[tuple[str, int | str, str, str], ...] = ()  # (name, value or "=expr", doc, key)
    notes: tuple[str, ...] = ()
    understood: Mapping[str, str] = field(default_factory=dict)
    positions: str = ""  # a learned position table's op (position_embedding: {...})
    embed_norm: bool = False
    project: bool = False  # token embeddings of width P, projected in and out of C
    final_norm: bool = True
    head_bias: bool = False
    head_note: str = ""
    attn_note: str = ""


@dataclass(frozen=True)
class GptLike:
    """One row of the GPT-like table: the family's model type, the transformers class its build writes, its
    keys and module paths, the reader of its switches, transformers' tie_word_embeddings default, a causal
    LM's two classes when the head is importer/head.py's (None: the template writes the head), the block's
    name, what the family refuses and its declared numeric keys."""

    model_type: str
    hf_class: str
    blurb: str
    keys: Keys
    paths: Paths
    read: Callable[[HFConfig, Sizes], Layer]
    block: str
    tied_default: bool = True
    lm: CausalLM | None = None
    refused: tuple[str, ...] = ()
    declared: tuple[Key, ...] = ()
    architectures: tuple[str, ...] = ()
    doc_name: str = ""

    def writes_head(self) -> bool:
        return self.lm is None or self.lm.writes == "whole"


def first_key(cfg: HFConfig, keys: tuple[str, ...]) -> str:
    return next((k for k in keys if cfg.has(k) and cfg.get(k) is not None), keys[0])


def sizes(spec: SpecText, cfg: HFConfig, k: Keys) -> Sizes:
    """The shared dims B, S, C, heads, D, F, L, V (written to the spec) and the activation."""
    width = first_key(cfg, k.width)
    C, h = cfg.get_int(width, *_default(k, width)), cfg.get_int(k.heads, *_default(k, k.heads))
    check_divides(cfg, width, C, k.heads, h)
    L, V = cfg.get_int(k.layers, *_default(k, k.layers)), cfg.get_int(k.vocab, *_default(k, k.vocab))
    spec.dim("B", 1, "batch size")
    if k.positions:
        key = first_key(cfg, k.positions)
        most = cfg.get_int(key, k.positions_default)
        spec.dim("S", min(DEFAULT_S, most), f"sequence length (tokens): min({DEFAULT_S}, the maximum {most}); "
                 f"--set S=... for another length up to {most}", key)
    else:
        spec.dim("S", DEFAULT_S, f"sequence length (tokens): {DEFAULT_S} (ALiBi has no maximum length); --set "
                 "S=... for another")
    spec.dim("C", C, "hidden size", width)
    spec.dim("heads", h, "attention heads", k.heads)
    spec.derived("D", "C / heads", "head dim")
    if k.mlp is not None and (k.mlp_ratio is None or cfg.get(k.mlp) is not None):
        F = cfg.get_int(k.mlp)
        spec.dim("F", F, "MLP width", k.mlp)
    else:
        F = (k.mlp_ratio or 4) * C
        spec.derived("F", f"{k.mlp_ratio} * C", f"MLP width ({k.mlp_ratio} x hidden"
                     + (f": {k.mlp} null or absent)" if k.mlp else ")"))
    spec.dim("L", L, "decoder layers", k.layers)
    spec.dim("V", V, "vocabulary size", k.vocab)
    fn = "gelu_tanh" if k.activation is None else activation(cfg, k.activation, k.activation_default)
    return Sizes(C, h, L, V, F, fn)


def _default(k: Keys, key: str) -> tuple[int, ...]:
    return (k.defaults[key],) if key in k.defaults else ()


def gelu_new(cfg: HFConfig, k: Keys) -> bool:
    """The config's activation is transformers' gelu_new (python-level ops, priced as one gelu_tanh)."""
    return k.activation is not None and cfg.get(k.activation, k.activation_default) == "gelu_new"


def gelu_new_note(cfg: HFConfig, k: Keys) -> tuple[str, ...]:
    return (GELU_NEW_NOTE,) if gelu_new(cfg, k) else ()


# ----------------------------------------------------------------------------------------------
# writing
# ----------------------------------------------------------------------------------------------
def _nest(lines: list[str], indent: str) -> list[str]:
    return [indent + line for line in lines]


def _branches(branches: list[list[str]], indent: str) -> list[str]:
    """Each branch (a list of item lines) as one entry of `branches:`."""
    out = []
    for branch in branches:
        out.append(f"{indent}- {branch[0]}")
        out.extend(f"{indent}  {line}" for line in branch[1:])
    return out


def block_lines(layer: Layer, paths: Paths, fn: str) -> list[str]:
    """The decoder layer in its layout."""
    attn = item(layer.attn, paths.attn, layer.attn_note)
    mlp_items = layer.mlp or ((f"mlp: {{hidden: F, fn: {fn}, bias: {'true' if layer.mlp_bias else 'false'}}}",
                               paths.mlp),)
    mlp = [line for op, source in mlp_items for line in item(op, source)]
    ln = [item(layer.norm, name) for name in layer.norms]
    if layer.layout == PARALLEL_ONE_NORM:
        return ["# x + attention(ln(x)) + mlp(ln(x)): one LayerNorm feeds both branches", "- residual:",
                *_nest(ln[0], "    "), "    - parallel:", "        join: add", "        branches:",
                *_branches([attn, mlp], "          ")]
    if layer.layout == PARALLEL_TWO_NORMS:
        return ["# x + attention(ln1(x)) + mlp(ln2(x)): both branches and the residual read x", "- parallel:",
                "    join: add", "    branches:", "      - []  # the input itself",
                *_branches([ln[0] + attn, ln[1] + mlp], "      ")]
    if layer.layout == PRE_LN:
        return ["- residual:", *_nest(ln[0] + attn, "    "), "- residual:", *_nest(ln[1] + mlp, "    ")]
    if layer.layout == POST_LN:
        return ["- residual:", *_nest(attn, "    "), *ln[0], "- residual:", *_nest(mlp, "    "), *ln[1]]
    if layer.layout == NORMED_RESIDUAL:
        return [*ln[0], "- residual:", *_nest(attn, "    "), *ln[1], "- residual:", *_nest(mlp, "    ")]
    raise ValueError(f"unknown GPT-like layout {layer.layout!r}; expected one of {LAYOUTS}")


def layer_lines(t: GptLike, layer: Layer, tied: bool) -> list[str]:
    """The top-level layers: embeddings, the repeat of blocks, the final LayerNorm, the LM head."""
    p = t.paths

    def named(op: str, module: str) -> list[str]:  # named after its module (wte, ln_f, ...)
        lines = item(op, p.top(module))
        return [*lines[:-1], f"  name: {module}", lines[-1]]

    lines = named(f"embedding: {{vocab: V, dim: {'P' if layer.project else 'C'}}}", p.embed)
    if layer.embed_norm:
        lines += named(layer.norm, p.embed_norm)
    if layer.project:
        lines += named("linear: {out: C, bias: false}", p.project_in)
    if layer.positions:
        lines += named(layer.positions, p.positions)
    lines += ["- repeat: L", f"  name: {p.blocks}", f"  body: {t.block}", f"  source: {p.top(p.blocks)}"]
    if layer.final_norm:
        lines += named(layer.norm, p.final_norm)
    if layer.project:
        lines += named("linear: {out: P, bias: false}", p.project_out)
    if t.writes_head():
        head = "lm_head: {vocab: V" + (", bias: true" if layer.head_bias else "") + (", tied: true" if tied else "")
        lines += item(head + "}", "lm_head", f"tie_word_embeddings: {'true' if tied else 'false'}{layer.head_note}")
    return lines


def build(t: GptLike, cfg: HFConfig) -> str:
    """The spec text of a GPT-like family's config."""
    described = t.lm.described(True) if t.lm is not None and t.lm.writes == "backbone" else t.hf_class
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {t.model_type}, transformers' "
                    f"{described})")
    size = sizes(spec, cfg, t.keys)
    layer = t.read(cfg, size)
    for name, value, doc, key in layer.dims:
        if isinstance(value, str) and value.startswith("="):
            spec.derived(name, value[1:], doc, key)
        else:
            spec.dim(name, value, doc, key)
    precision(spec, cfg)
    spec.input(["B", "S"], "token ids")
    for note in layer.notes:
        spec.note(note)
    spec.block(t.block, "\n".join(block_lines(layer, t.paths, size.fn)) + "\n")
    spec.header.extend(wrap_comment(f"`source:` and `ignore:` name modules of transformers' {described} "
                                    "(transformers 5)"))
    if layer.ignore:
        spec.ignore(layer.ignore)
    tied = cfg.get_bool("tie_word_embeddings", t.tied_default)
    spec.layers("\n".join(layer_lines(t, layer, tied)) + "\n")
    head = ""
    if t.writes_head() and not cfg.backbone:
        head = f", {'biased ' if layer.head_bias else ''}LM head{' tied to the embedding' if tied else ''}"
    spec.doc = (f"{t.doc_name or t.model_type} imported from a Hugging Face config: {layer.blocks}{head}")
    text = spec.render()
    cfg.check_understood(dict(layer.understood))
    return text


def family(t: GptLike) -> Family:
    """The importer family of a table row."""
    whole = t.lm.whole if t.lm is not None else t.hf_class
    return Family((t.model_type,), whole, lambda cfg: build(t, cfg), t.blurb, architectures=t.architectures,
                  keys=t.declared, lm=t.lm, refused=t.refused)
