"""ModernBERT (ModernBertModel, what AutoModel builds: no head): pre-LN layers with fused Wqkv, RoPE, bidirectional
local attention on the sliding layers (a window of local_attention tokens), a GeGLU MLP from one fused Wi, and
LayerNorms without bias by default; layer 0 has no norm before its attention. The spec's structure is
tests/against/specs/modernbert_local.yaml's: layer 0 written out, then a repeat over the others with the
minority attention kind as an `at:` variant.
"""
from __future__ import annotations

from costspec.importer.config import HFConfig, ImportProblem, heads, layers, size
from costspec.importer.emit import SpecText
from costspec.importer.families import Family
from costspec.importer.families.bert import DEFAULT_DTYPE
from costspec.importer.families.common import activation

DEFAULT_S = 4096  # the sequence length when the model allows more (its maximum is the dim's doc)
HEAD = "the heads of ModernBertFor* classes (ModernBertModel, the spec, has none)"
CONSTANT = "the rotary frequencies are constants: RoPE costs 2 mul + 1 add per rotated element whatever they are"
IGNORED = {
    "tie_word_embeddings": "the spec is the encoder: no masked-LM decoder whose weight could be tied",
    "decoder_bias": HEAD, "classifier_pooling": HEAD, "classifier_bias": HEAD, "classifier_activation": HEAD,
    "sparse_prediction": HEAD, "sparse_pred_ignore_index": HEAD, "repad_logits_with_grad": HEAD,
    "initializer_cutoff_factor": "initialisation only",
    "deterministic_flash_attn": "a flash-attention kernel setting: the same matmuls",
    "reference_compile": "torch.compile of the reference implementation: the same work",
    "global_rope_theta": CONSTANT, "local_rope_theta": CONSTANT,
    "position_embedding_type": "a BERT key some ModernBERT configs carry; ModernBertModel does not read it (RoPE)",
}
REFUSED = ("layer_types with an entry other than full_attention / sliding_attention, or not one per layer",
           "a rope_type other than default (RoPE variants are constants, but only default is checked here)")
KEYS = (size("vocab_size"), size("hidden_size"), size("intermediate_size"), layers("num_hidden_layers"),
        heads("num_attention_heads", "hidden_size", rope=True), size("max_position_embeddings"),
        size("local_attention"), size("global_attn_every_n_layers"))
KINDS = ("full_attention", "sliding_attention")


def _sliding(cfg: HFConfig, L: int) -> list[bool]:
    """Which layers attend locally: layer_types, else every layer not a multiple of global_attn_every_n_layers
    (the older configs' key, which ModernBertConfig turns into layer_types)."""
    types = cfg.get("layer_types")
    every = cfg.get_int("global_attn_every_n_layers", 3)
    if types is None:
        return [bool(i % every) for i in range(L)]
    if not isinstance(types, list) or len(types) != L or any(t not in KINDS for t in types):
        raise cfg.refuse("layer_types", f"expected a list of {L} entries (num_hidden_layers), each full_attention or "
                                        "sliding_attention")
    return [t == "sliding_attention" for t in types]


def _rope(cfg: HFConfig) -> None:
    params = cfg.get("rope_parameters", {})
    if not isinstance(params, dict):
        raise cfg.refuse("rope_parameters", "expected an object per layer kind (full_attention, sliding_attention)")
    for kind, each in params.items():
        if kind not in KINDS or not isinstance(each, dict):
            raise cfg.refuse("rope_parameters", "expected an object per layer kind (full_attention, "
                                                "sliding_attention)")
        if each.get("rope_type", "default") != "default":
            raise cfg.refuse("rope_parameters", f"{kind}.rope_type {each.get('rope_type')!r}: only default RoPE is "
                                                "imported for ModernBERT")
    if cfg.get("rope_scaling") is not None:
        raise cfg.refuse("rope_scaling", "only default RoPE is imported for ModernBERT (expected null)")


def build_modernbert(cfg: HFConfig) -> str:
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type modernbert, transformers' "
                                  "ModernBertModel)")
    C = cfg.get_int("hidden_size")
    H = cfg.get_int("num_attention_heads")
    if C % H or (C // H) % 2:
        raise ImportProblem(f"{cfg.where('hidden_size')} = {C}: expected a multiple of num_attention_heads = {H} "
                            "with an even head dim (RoPE rotates pairs of channels)")
    L = cfg.get_int("num_hidden_layers")
    P = cfg.get_int("max_position_embeddings")
    window = cfg.get_int("local_attention")
    sliding = _sliding(cfg, L)
    _rope(cfg)
    fn = activation(cfg, "hidden_activation", "gelu")
    norm = "{}" if cfg.get_bool("norm_bias", False) else "{bias: false}"
    attn_bias = "true" if cfg.get_bool("attention_bias", False) else "false"
    mlp_bias = "true" if cfg.get_bool("mlp_bias", False) else "false"
    S = min(DEFAULT_S, P)
    spec.dim("B", 1, "batch size")
    spec.dim("S", S, f"sequence length (tokens; at most max_position_embeddings = {P})",
             f"min({DEFAULT_S}, max_position_embeddings)")
    spec.dim("C", C, "hidden size", "hidden_size")
    spec.dim("heads", H, "attention heads", "num_attention_heads")
    spec.dim("L", L, "layers", "num_hidden_layers")
    spec.dim("F", cfg.get_int("intermediate_size"), "MLP hidden width (Wi projects to 2F)", "intermediate_size")
    spec.dim("V", cfg.get_int("vocab_size"), "vocabulary size", "vocab_size")
    if any(sliding):
        spec.dim("LW", window, "local attention window (|i - j| <= LW // 2)", "local_attention")
    if cfg.dtype_source == "--dtype" or cfg.get("torch_dtype") is not None or cfg.get("dtype") is not None:
        spec.precision(cfg.dtype, cfg.dtype_source)
    else:
        spec.precision(DEFAULT_DTYPE, "the config names no dtype: bf16, as these models are run (--dtype to change)")
    spec.input(["B", "S"], "token ids")
    n_local = sum(sliding)
    spec.doc = (f"ModernBERT encoder imported from a Hugging Face config: token embedding, LayerNorm, {L} pre-LN "
                f"layers (width {C}, {H} heads, fused Wqkv, RoPE; {L - n_local} global and {n_local} local "
                f"attention layers, bidirectional, window {window}; {fn} GeGLU MLP from one fused Wi), final "
                "LayerNorm; layer 0 has no norm before its attention; no head")
    attention = f"attention: {{heads: heads, qkv_bias: {attn_bias}, proj_bias: {attn_bias}, rope: true"
    mlp = f"mlp: {{hidden: F, gated: true, fn: {fn}, bias: {mlp_bias}}}  # Wi (C -> 2F, chunked: act(input) * gate), Wo"
    spec.block("mbert_block", f"""\
params: {{local: 0}}
layers:
  - residual:
      - layernorm: {norm}
        source: attn_norm
      - {attention}, local_window: local}}
        source: attn
  - residual:
      - layernorm: {norm}
        source: mlp_norm
      - {mlp}
        source: mlp
""")
    spec.header.append("# `source:` and `ignore:` name modules of transformers' ModernBertModel")
    spec.ignore("""\
- module: "layers.*.attn"
  extra: {scale: "L*B*S*C"}
  reason: >-
    transformers' rotate_half builds [-x2, x1] with a neg (a multiplication by -1: the `scale` kind) of
    half of q and k, B*S*2*C/2 elements per layer, forward and backward; the spec's RoPE folds the sign into
    the sin table (2 mul + 1 add per element)
- module: "layers.*.attn"
  extra: {add: "L*2*B*S*C"}
  pass: backward
  reason: >-
    rotate_half's backward: the gradients of the two halves it slices from q and k are added back into one
    tensor, one add per element of q and k (B*S*2*C per layer) that the spec's RoPE (one flip) does not run
- module: "layers.*.mlp"
  extra: {add: "-L*B*S*C"}
  pass: backward
  reason: >-
    ModernBERT's Wi is one C -> 2F projection chunked into the GeGLU's input and gate: its input gradient is
    one GEMM, where the spec's gated mlp has separate gate and up projections whose input gradients are summed
    (B*S*C adds per layer that ModernBERT does not run)
""")
    first_local = ", local_window: LW" if sliding[0] else ""
    body = f"""\
- embedding: {{vocab: V, dim: C}}
  source: embeddings.tok_embeddings
- layernorm: {norm}
  source: embeddings.norm
- sequence:  # layer 0: no norm before its attention (ModernBERT's attn_norm is an Identity there)
    - residual:
        - {attention}{first_local}}}
          source: attn
    - residual:
        - layernorm: {norm}
          source: mlp_norm
        - {mlp}
          source: mlp
  name: first
  source: layers.0
"""
    rest = sliding[1:]
    if rest:
        majority = sum(rest) * 2 >= len(rest)
        minority = [i for i, s in enumerate(rest) if s != majority]
        value, other = ("LW", "0") if majority else ("0", "LW")
        body += f"""\
- repeat: L - 1  # layers 1 .. L-1 (layer_types)
  name: layers
  body: mbert_block
  source: layers
  args: {{local: {value}}}
"""
        if minority:
            name = "full" if majority else "local"
            body += f"  at:\n    - {{indices: {minority}, name: {name}, args: {{local: {other}}}}}\n"
    body += f"""\
- layernorm: {norm}
  name: final_norm
  source: final_norm
"""
    spec.layers(body)
    cfg.check_understood(IGNORED)
    return spec.render()


MODERNBERT = Family(("modernbert",), "ModernBertModel", build_modernbert,
                    "ModernBERT encoder: fused Wqkv, RoPE, global and bidirectional local layers (layer_types), "
                    "GeGLU MLP, bias-free LayerNorms (no head)",
                    architectures=("ModernBertModel", "ModernBertForMaskedLM"), refused=REFUSED, keys=KEYS)

FAMILY_LIST = (MODERNBERT,)
