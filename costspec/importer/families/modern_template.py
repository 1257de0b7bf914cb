"""The decoder template of the Llama-like causal LMs (its table of families is modern.py): a `Template` of
switches (norm kind and placement, biases, q/k norm, sliding / global layers, soft-caps, partial rotary, NoPE
layers, MoE router, MLA, tied head, embedding, residual and logit scales) and `build`, the spec text of a config
for one template: the whole `*ForCausalLM` with its LM head.

Defaults: a config without a dtype is imported in bf16 (how these models are published and run; the
header says so); S is min(4096, max_position_embeddings), the maximum named in the dim's doc.
"""
from __future__ import annotations

from costspec.importer import rope as rope_tables
from costspec.importer.config import HFConfig, ImportProblem
from costspec.importer.emit import SpecText, wrap_comment
from costspec.importer.families.common import GELU_NEW_NOTE, activation, check_divides
from costspec.importer.families.modern_moe import MLA_IGNORED, gather_rule, mla_op, moe_op
from costspec.importer.families.modern_moe import layer_kinds as moe_layers
from costspec.importer.families.modern_rules import rules
from costspec.importer.families.modern_switches import Dims, Template

DEFAULT_S = 4096  # the sequence length when the model allows more (its maximum is the dim's doc)
DEFAULT_DTYPE = "bf16"
ROPE_REFUSED = "a rope_type transformers 5 does not have, or a rope table key no rope_type reads"
ROPE_CONSTANTS = "the rotary frequencies are constants: RoPE costs 2 mul + 1 add per rotated element whatever they are"
BASE_IGNORED = {
    "rope_theta": ROPE_CONSTANTS, "rope_local_base_freq": ROPE_CONSTANTS,
    "original_max_position_embeddings": "read by longrope / yarn frequencies only (constants)",
    "pretraining_tp": "a tensor-parallel slicing of the same GEMMs at pretraining",
    "query_pre_attn_scalar": "the score scale 1/sqrt(query_pre_attn_scalar): a constant, the same cost",
    "attention_multiplier": "the score scale: a constant multiply, as 1/sqrt(head_dim) is (the same cost)",
    "_sliding_window_pattern": "the layer pattern layer_types spells out (read there)",
    "sliding_window_pattern": "the layer pattern layer_types spells out (read there)",
    "cache_implementation": "the generation KV cache's layout (hybrid for sliding layers): not the forward's cost",
    "auto_map": "the remote-code classes of the original repository; the spec follows transformers' own class",
    "router_aux_loss_coef": "the load-balancing loss: training objective, not the model",
    "output_router_logits": "returns the router logits the model computes anyway",
}


# ----------------------------------------------------------------------------------------------
# reading
# ----------------------------------------------------------------------------------------------
def rope(cfg: HFConfig, partial: bool, default: float = 1.0) -> float:
    """RoPE's settings (rope_parameters, rope_scaling, per layer kind in Gemma 3): a fraction of the head
    rotated (partial_rotary_factor, `default` when the config names none); every rope_type is read."""
    fraction = default
    for table in rope_tables.read(cfg, frozenset({"partial_rotary_factor"})):
        if "partial_rotary_factor" in table:
            if not partial:
                key = next(k for k in rope_tables.KEYS if cfg.has(k))
                raise cfg.refuse(key, "partial_rotary_factor: this family rotates the whole head")
            fraction = table["partial_rotary_factor"]
    if partial and cfg.has("partial_rotary_factor"):
        fraction = cfg.get("partial_rotary_factor")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise ImportProblem(f"{cfg.where('partial_rotary_factor')} = {fraction!r}: expected a number in (0, 1]")
    return float(fraction)


def layer_kinds(cfg: HFConfig, t: Template, layers: int) -> tuple[list[bool], int]:
    """Per layer, sliding (True) or full attention, and the window."""
    if t.sliding == "none":
        return [False] * layers, 0
    window = cfg.get_int("sliding_window", 0, minimum=0)
    if t.sliding in ("qwen", "qwen2_moe"):
        use = cfg.get_bool("use_sliding_window", False)
        bound = cfg.get_int("max_window_layers", 28, minimum=0)
        if t.sliding == "qwen":  # layers from max_window_layers on slide
            derived = [use and bool(window) and i >= bound for i in range(layers)]
        else:  # Qwen2-MoE's rule: the even layers below max_window_layers slide
            derived = [use and bool(window) and i % 2 == 0 and i < bound for i in range(layers)]
    else:
        derived = [bool(window)] * layers
    listed = cfg.get("layer_types")
    if listed is None or t.sliding == "all":
        return derived, window
    kinds = ("full_attention", "sliding_attention")
    if not isinstance(listed, list) or len(listed) != layers or not all(isinstance(k, str) and k in kinds
                                                                        for k in listed):
        raise cfg.refuse("layer_types", f"expected {layers} entries (num_hidden_layers), each full_attention or "
                         "sliding_attention")
    if t.sliding in ("qwen", "qwen2_moe") and not cfg.get_bool("use_sliding_window", False):
        return [False] * layers, window  # Qwen's attention reads the window only with use_sliding_window
    sliding = [k == "sliding_attention" for k in listed]
    if any(sliding) and not window:
        raise cfg.refuse("layer_types", "sliding_attention layers without a sliding_window")
    return sliding, window


def read_dims(spec: SpecText, cfg: HFConfig, t: Template) -> Dims:
    """B, S, C, heads, KV, D, L, V (W) from the config, each commented with its key."""
    C = cfg.get_int("hidden_size")
    heads = cfg.get_int("num_attention_heads")
    kv = cfg.get_int("num_key_value_heads", heads)
    if heads % kv and not t.mla:
        raise ImportProblem(f"{cfg.where('num_key_value_heads')} = {kv} does not divide num_attention_heads = {heads}")
    if cfg.get("head_dim") is None and not t.mla:
        check_divides(cfg, "hidden_size", C, "num_attention_heads", heads)
    head_dim = cfg.get_int("head_dim", max(C // heads, 1))
    L = cfg.get_int("num_hidden_layers")
    spec.dim("B", 1, "batch size")
    S = sequence_dim(spec, cfg, t.positions_default)
    spec.dim("C", C, "hidden size", "hidden_size")
    spec.dim("heads", heads, "query heads", "num_attention_heads")
    if not t.mla:
        spec.dim("KV", kv, "key/value heads (grouped-query attention when fewer than heads)", "num_key_value_heads")
        if head_dim * heads == C:
            spec.derived("D", "C / heads", "head dim")
        else:
            spec.dim("D", head_dim, "head dim (not C / heads)", "head_dim")
    spec.dim("L", L, "decoder layers", "num_hidden_layers")
    spec.dim("V", cfg.get_int("vocab_size"), "vocabulary size", "vocab_size")
    sliding, window = layer_kinds(cfg, t, L)
    if any(sliding) and S < window:
        spec.note(f"sliding_window {window} is longer than S = {S}: every query sees all earlier tokens, so every "
                  "layer is written as full causal attention (transformers' window mask then masks nothing more); at "
                  f"S >= {window} the sliding layers take `sliding_window: W`")
        sliding = [False] * L
    if any(sliding):
        spec.dim("W", window, "attention sliding window (query i sees keys i-W+1..i)", "sliding_window")
    return Dims(C, heads, kv, head_dim, L, S, tuple(sliding), window if any(sliding) else 0)


def sequence_dim(spec: SpecText, cfg: HFConfig, most_default: int, key: str = "max_position_embeddings") -> int:
    """The dim S: min(DEFAULT_S, the model's maximum `key`), the maximum in its doc; its value."""
    most = cfg.get_int(key, most_default)
    S = min(DEFAULT_S, most)
    spec.dim("S", S, f"sequence length (tokens): min({DEFAULT_S}, the maximum {most}); --set S=... for another "
             f"length up to {most}", key)
    return S


def precision(spec: SpecText, cfg: HFConfig) -> None:
    """The config's dtype (or --dtype); bf16 when it names none."""
    if cfg.dtype_source == "--dtype" or cfg.get("torch_dtype") is not None or cfg.get("dtype") is not None:
        spec.precision(cfg.dtype, cfg.dtype_source)
    else:
        spec.precision(DEFAULT_DTYPE, "the config names no dtype: bf16, as these models are published and run "
                       "(--dtype to change)")


def check_refused(cfg: HFConfig, t: Template) -> None:
    """Keys whose value the family cannot price: an ImportProblem naming the key and why."""
    for key, why in t.needs.items():
        if cfg.get(key) is None:
            raise ImportProblem(f"{cfg.where(key)}: missing or null: transformers' {t.hf_class} cannot run without "
                                f"it ({why})")
    for key in (*t.refuse_true, *t.refuse_set):
        value = cfg.get_bool(key, False) if key in t.refuse_true else cfg.get(key)
        if value not in (None, False):
            raise cfg.refuse(key, f"not supported by the {t.title} importer ({REFUSE_WHY[key]})")


REFUSE_WHY = {
    "use_bidirectional_attention": "the spec is a causal decoder",
    "mlp_bias": "biases on the dense and shared-expert MLPs but not on the routed experts: the moe op has one bias "
                "switch for both",
    "clip_qkv": "q, k and v clamped to [-clip, clip] after their projections: the attention op has no clamp",
}


def number(cfg: HFConfig, key: str, default: float) -> float:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ImportProblem(f"{cfg.where(key)} = {value!r}: expected a number")
    return float(value)


# ----------------------------------------------------------------------------------------------
# writing
# ----------------------------------------------------------------------------------------------
NORMS = {"rmsnorm": "rmsnorm: {}", "layernorm": "layernorm: {}", "layernorm_nobias": "layernorm: {bias: false}",
         "layernorm_plain": "layernorm: {affine: false}"}


def attention_text(spec: SpecText, cfg: HFConfig, t: Template, dims: Dims, window: str, fraction: float) -> str:
    bias = cfg.get_bool(t.bias_key, t.bias_default) if t.bias_key else t.bias_default
    flags = {"q": bias, "k": bias, "v": bias, "o": bias and t.o_bias}
    parts = ["heads: heads", "kv_heads: KV", "head_dim: D", f"fused_qkv: {'true' if t.fused_qkv else 'false'}",
             "rope: true", "causal: true"]
    parts += [f"{n}_bias: {'true' if on else 'false'}" for n, on in flags.items()]
    if fraction < 1:
        rotary = int(dims.head_dim * fraction)
        if rotary < 2 or rotary % 2:
            raise ImportProblem(f"{cfg.where('partial_rotary_factor')} = {fraction!r}: int(head_dim {dims.head_dim} "
                                f"* {fraction!r}) = {rotary} rotary dims; expected an even number >= 2 (rotate_half "
                                "pairs the dims)")
        dims.extra["R"] = rotary
        parts.append("rope_dims: R")
    if window:
        parts.append(f"sliding_window: {window}")
    on = cfg.get_bool(t.qk_norm_key, False) if t.qk_norm_key else True
    if t.qk_norm != "none" and on:
        parts.append(f"qk_norm: {t.qk_norm}")
        if t.qk_norm_over != "head":
            parts.append(f"qk_norm_over: {t.qk_norm_over}")
        if t.qk_norm_weight != "shared":
            parts.append(f"qk_norm_weight: {t.qk_norm_weight}")
        if t.qk_norm_bias:
            parts.append("qk_norm_bias: true")
    if t.sinks:
        parts.append("sinks: true")
        dims.eager = True
    cap = number(cfg, t.attn_softcap_key, 0.0) if t.attn_softcap_key else 0.0
    if cap:
        parts.append(f"softcap: {cap!r}")
        dims.eager = True
    elif t.eager:  # no soft-cap, but transformers still runs eager attention: the spec follows it
        parts.append("backend: eager")
        spec.note(f"{t.hf_class} always runs eager attention (no SDPA path): the attention is written with "
                  "backend: eager, as it runs; drop it for the cost of a flash kernel")
        dims.eager = True
    return "attention: {" + ", ".join(parts) + "}"


def mlp_text(cfg: HFConfig, t: Template, fn: str) -> str:
    bias = cfg.get_bool(t.mlp_bias_key, t.mlp_bias_default) if t.mlp_bias_key else t.mlp_bias_default
    gated = "gated: true, " if t.mlp == "gated" else ""
    return f"mlp: {{hidden: F, {gated}fn: {fn}, bias: {'true' if bias else 'false'}}}"


def sliding_layout(window: int, sliding: list[bool] | tuple[bool, ...]) -> tuple[str, str, str]:
    """(block params line, the attention's window argument, the repeat's `at:` lines) for a window and the
    per-layer sliding flags: one block whose `window` parameter is W on sliding layers and 0 on full ones."""
    if not window:
        return "", "", ""
    on = [i for i, s in enumerate(sliding) if s]
    full = [i for i, s in enumerate(sliding) if not s]
    if not full:
        return "", "W", ""
    majority_sliding = len(on) >= len(full)
    params = f"params: {{window: {'W' if majority_sliding else 0}}}  # W on sliding-window layers, 0 on full ones"
    minority, name, value = (full, "full", "0") if majority_sliding else (on, "sliding", "W")
    at = f"at:\n  - {{indices: {minority}, name: {name}, args: {{window: {value}}}}}  # layer_types"
    return params, "window", at


def activation_fn(spec: SpecText, cfg: HFConfig, t: Template) -> str:
    """The MLP's activation, from the first of the family's keys the config sets (Gemma's legacy "gelu": the
    tanh GELU transformers reads it as)."""
    key = next((k for k in t.act_keys if cfg.get(k) is not None), t.act_keys[0])
    if t.legacy_gelu and cfg.get(key) == "gelu":
        spec.note(f"{key} gelu: transformers' {t.title} config reads the legacy 'gelu' as gelu_pytorch_tanh (the "
                  "tanh GELU: gelu_tanh)")
        return "gelu_tanh"
    if cfg.get(key, t.act_default) == "gelu_new":
        spec.note(GELU_NEW_NOTE)
    return activation(cfg, key, t.act_default)


def wrap_flow(op: str, width: int = 96) -> list[str]:
    """`name: {a, b, ...}` as lines of at most `width`, the continuations aligned under the first attribute."""
    head, _, body = op.partition("{")
    parts = body.rstrip("}").split(", ")
    lines, line = [], head + "{"
    pad = " " * len(line)
    for i, part in enumerate(parts):
        text = part + (", " if i < len(parts) - 1 else "}")
        if len(line) + len(text.rstrip()) > width and line.strip() not in ("", head.strip() + " {"):
            lines.append(line.rstrip())
            line = pad
        line += text
    return [*lines, line]


def item(op: str, source: str = "", note: str = "") -> list[str]:
    """One list item (its op on the dash line, wrapped, `source:` under it)."""
    first, *rest = wrap_flow(op)
    lines = [f"- {first}" + (f"  # {note}" if note else ""), *("  " + line for line in rest)]
    if source:
        lines.append(f"  source: {source}")
    return lines


def residual(items: list[list[str]]) -> list[str]:
    out = ["- residual:"]
    for lines in items:
        out.extend("    " + line for line in lines)
    return out


def block_lines(t: Template, attn: str, mlp: str, multiplier: float) -> list[str]:
    """The decoder block of the template's norm layout (Granite: each branch times residual_multiplier)."""
    norm = NORMS[t.norm]
    scale = [item(f"scale: {{by: {multiplier!r}}}", note="residual_multiplier")] if multiplier != 1.0 else []
    a = item(attn, "self_attn")
    m = item(mlp, "mlp")
    if t.layout == "parallel":
        branches = ["- parallel:", "    join: add", "    branches:",
                    f"      - [{{{attn}, source: self_attn}}]", f"      - [{{{mlp}, source: mlp}}]"]
        return residual([item(norm, "input_layernorm"), branches])
    if t.layout == "post":
        return (residual([a, item(norm, "post_attention_layernorm"), *scale])
                + residual([m, item(norm, "post_feedforward_layernorm"), *scale]))
    if t.layout == "sandwich":
        return (residual([item(norm, "input_layernorm"), a, item(norm, "post_attention_layernorm"), *scale])
                + residual([item(norm, "pre_feedforward_layernorm"), m, item(norm, "post_feedforward_layernorm"),
                            *scale]))
    return (residual([item(norm, "input_layernorm"), a, *scale])
            + residual([item(norm, "post_attention_layernorm"), m, *scale]))


def with_params(params: str, lines: list[str]) -> str:
    if not params:
        return "\n".join(lines) + "\n"
    return params + "\nlayers:\n" + "\n".join("  " + line for line in lines) + "\n"


def head_lines(cfg: HFConfig, t: Template) -> tuple[list[str], bool]:
    """The LM head and what transformers runs after it (logit scale, final soft-cap)."""
    tied = cfg.get_bool("tie_word_embeddings", t.tied_default)
    attrs = "vocab: V" + (", tied: true" if tied else "") + (", bias: true" if t.head_bias else "")
    lines = [f"- lm_head: {{{attrs}}}  # tie_word_embeddings: "
             f"{'true (shares embed_tokens)' if tied else 'false'}", "  source: lm_head"]
    if t.logits:
        how, key = t.logits.split(":")
        value = number(cfg, key, 1.0)
        by = f"1/{value!r}" if how == "div" else repr(value)
        lines += [f"- scale: {{by: {by}}}  # the logits {'divided by' if how == 'div' else 'times'} {key}"]
    cap = number(cfg, t.final_softcap_key, 0.0) if t.final_softcap_key else 0.0
    if cap:
        lines += ["# final logit soft-capping: cap * tanh(logits / cap)", f"- scale: {{by: 1/{cap!r}}}",
                  "- activation: {fn: tanh}", f"- scale: {{by: {cap!r}}}"]
    return lines, tied


def embed_lines(cfg: HFConfig, t: Template) -> list[str]:
    lines = ["- embedding: {vocab: V, dim: C}", "  name: embed_tokens", "  source: model.embed_tokens"]
    if t.embed_scale == "sqrt":
        lines.append("- scale: {by: sqrt(C)}  # the scaled word embedding: embeddings x sqrt(hidden_size)")
    elif t.embed_scale:
        value = number(cfg, t.embed_scale, 1.0)
        lines.append(f"- scale: {{by: {value!r}}}  # {t.embed_scale}")
    return lines


def block_name(t: Template, sparse: bool, rope_on: bool, single: bool) -> str:
    if single:
        return "decoder_block"
    return ("moe_" if sparse else "dense_" if t.moe else "") + ("" if rope_on else "nope_") + "block"


def layer_uses(names: list[str], dims: Dims) -> list[str]:
    """Layers of more than one kind, one block use per layer (a repeat's instances share one body)."""
    out = []
    for i, name in enumerate(names):
        window = f", args: {{window: {'W' if dims.sliding[i] else 0}}}" if dims.window else ""
        out.append(f"- {{block: {name}, name: layer{i}, source: model.layers.{i}{window}}}")
    return out


def rope_layers(cfg: HFConfig, t: Template, layers: int) -> list[bool]:
    """Per layer, RoPE on q and k (SmolLM3's no_rope_layers: 1 rotates, 0 is a NoPE layer)."""
    if not t.nope_key:
        return [True] * layers
    listed = cfg.get(t.nope_key)
    if listed is None:
        return [True] * layers
    if not isinstance(listed, list) or len(listed) != layers or not set(listed) <= {0, 1}:
        raise cfg.refuse(t.nope_key, f"expected {layers} entries (num_hidden_layers), each 0 (no RoPE) or 1")
    return [bool(v) for v in listed]


def build(t: Template, cfg: HFConfig) -> str:
    """The spec text of the config: the whole causal LM."""
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {t.model_type}, transformers' "
                    f"{t.hf_class})")
    check_refused(cfg, t)
    fraction = rope(cfg, t.partial_rotary, t.rotary_default)
    dims = read_dims(spec, cfg, t)
    fn = activation_fn(spec, cfg, t)
    for note in t.notes:
        spec.note(note)
    params, window, at = sliding_layout(dims.window, dims.sliding)
    attn = mla_op(spec, cfg) if t.mla else attention_text(spec, cfg, t, dims, window, fraction)
    kinds = moe_layers(cfg, t.moe, dims.layers) if t.moe else [False] * dims.layers
    mlp, what = mlp_text(cfg, t, fn), f"{'gated ' if t.mlp == 'gated' else ''}{fn} MLP"
    if not all(kinds):
        spec.dim("F", cfg.get_int("intermediate_size"), "MLP width" + (" of the dense layers" if any(kinds) else ""),
                 "intermediate_size")
    if t.moe is not None and any(kinds):
        moe, what = moe_op(spec, cfg, t.moe, fn)
        if not all(kinds):
            what += f" in {sum(kinds)} of {dims.layers} layers (the others dense, {fn} MLP)"
    elif t.moe is not None:  # every layer dense at this depth: the MoE's keys are read and checked, not written
        moe_op(SpecText(cfg.name, "", ""), cfg, t.moe, fn, routed=False)
        what += " (every layer dense: no MoE layer at this depth)"
    for name, value in dims.extra.items():
        spec.dim(name, value, "rotated dims per head (partial_rotary_factor x head_dim)", "partial_rotary_factor")
    multiplier = number(cfg, t.residual_scale_key, 1.0) if t.residual_scale_key else 1.0
    precision(spec, cfg)
    spec.input(["B", "S"], "token ids")
    rope_on = rope_layers(cfg, t, dims.layers)
    dims.extra_rope = sum(rope_on)
    keys = list(zip(kinds, rope_on))
    single = len(set(keys)) == 1
    mixed = not single
    if mixed and dims.window:
        params, window = "params: {window: W}  # W on sliding-window layers, 0 on full ones", "window"
        attn = attn.replace("sliding_window: W", "sliding_window: window")
    names = [block_name(t, sparse, on, single) for sparse, on in keys]
    for key, name in dict(zip(keys, names)).items():
        sparse, on = key
        text = attn if on else attn.replace("rope: true", "rope: false").replace(", rope_dims: R", "")
        spec.block(name, with_params(params, block_lines(t, text, moe if sparse else mlp, multiplier)))
    head, tied = head_lines(cfg, t)
    window_note = (f", sliding window {dims.window} on {sum(dims.sliding)} of {dims.layers} layers"
                   if dims.window else "")
    heads = (f"multi-head latent attention, {dims.heads} heads" if t.mla else
             f"{dims.heads} query and {dims.kv} key/value heads of {dims.head_dim}")
    spec.doc = (f"{t.title} causal LM imported from a Hugging Face config: embedding, {dims.layers} blocks "
                f"(hidden {dims.C}, {heads}, RoPE, causal{window_note}; {what}), final norm"
                + ("" if cfg.backbone else f", LM head{' tied to the embedding' if tied else ''}"))
    spec.header.extend(wrap_comment(f"`source:` and `ignore:` name modules of transformers' {t.hf_class} "
                                    "(transformers 5)"))
    moe_count = "L" if all(kinds) else str(sum(kinds))
    ignores = rules(cfg, t, dims) + (gather_rule(moe_count, t.moe.router == "gpt_oss")
                                     if t.moe is not None and any(kinds) else "")
    if ignores:
        spec.ignore(ignores)
    if mixed:
        body = layer_uses(names, dims)
    else:
        body = ["- repeat: L", "  name: layers", "  body: decoder_block", "  source: model.layers"]
        body += ["  " + line for line in at.splitlines()]
    norm = [f"- {NORMS[t.norm]}", f"  name: {t.final_norm}", f"  source: model.{t.final_norm}"]
    spec.layers("\n".join(embed_lines(cfg, t) + body + norm + head) + "\n")
    text = spec.render()
    unused = ({"intermediate_size": "the width of dense MLPs: every layer here is MoE"}
              if all(kinds) and t.moe and t.moe.width_key != "intermediate_size" else {})
    ignored = {**BASE_IGNORED, **(MLA_IGNORED if t.mla else {}), **unused, **t.ignored}
    cfg.check_understood({key: why for key, why in ignored.items() if cfg.has(key)})
    return text
