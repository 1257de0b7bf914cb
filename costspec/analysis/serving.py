"""Serving phases of a decoder: prefill (the spec's forward over its S input tokens, the KV cache
written) and decode (one new token per sequence, attending to N cached tokens and itself).

A phase is a rewrite of the spec document, so every command costs it with the same ops: every
`attention` and `mla` layer gets `cache: N` (its SDPA reads N cached keys besides the new ones; its projections,
rope and norms run on the new tokens only), the context N becomes a dim (named `N`, or `ctx` when
the spec already has an `N`), and decode sets the input's token axis (axis 1) to 1. Prefill without a
context is the spec unchanged (its KV cache: every input token); prefill with one is a chunked
prefill (S new tokens after N cached ones).

Decode is exact for specs whose layers act on each token alone besides causal self-attention (norms,
linears, MLPs, MoE, embeddings, pointwise ops): any other layer mixes tokens in ways a cache does not
describe, and is refused by name.

An encoder-decoder (cross-attention reading a value an earlier top-level layer saves) decodes as transformers
steps it with `encoder_outputs` and an EncoderDecoderCache (`decoder_doc`): the encoder's layers dropped, the
decoder's token input made the input, every cross-attention reading `kv_cache` cached encoder tokens (no k/v
projections), then the decoder served as above. Its prefill is the whole forward (a context caches the decoder's
causal self-attention only).
"""
from __future__ import annotations

import copy
from typing import Any

from costspec.core.dims import API_WORDS, Wording
from costspec.core.errors import UsageError
from costspec.core.vocab import Backend, Serve
from costspec.core.yaml_marks import MarkedDoc
from costspec.tree.network import Network

CONTEXT_DIMS = ("N", "ctx")  # the name the context dim takes: the first one the spec leaves free
# ops that act on each token by itself: their decode cost is their cost on the one new token
PER_TOKEN_OPS = frozenset({"activation", "add", "attention", "dropout", "embedding", "fanout", "layer_scale",
                           "layernorm", "linear", "lm_head", "mla", "mlp", "moe", "mul", "position_embedding",
                           "rmsnorm", "scale"})
CACHED_OPS = ("attention", "mla")  # the ops with a key/value cache (a `cache` attribute)


def context_dim(doc: MarkedDoc) -> str:
    """The name of the context dim for this spec (see CONTEXT_DIMS)."""
    data: Any = doc.data or {}
    taken = set(data.get("dims") or {})
    for name in CONTEXT_DIMS:
        if name not in taken:
            return name
    raise UsageError(f"the spec defines dims {' and '.join(CONTEXT_DIMS)}, the names the serving context takes: "
                     "rename one")


def serving_doc(network: Network, phase: Serve | str, context: int | None,
                words: Wording = API_WORDS) -> MarkedDoc:
    """The spec document of `network` rewritten for `phase` with `context` cached tokens (see the module
    docstring); the document unchanged for prefill without a context. UsageError when the spec cannot
    be served this way (no causal attention, a layer that mixes tokens, an input without a token axis),
    naming phase and context in `words` (the API's arguments by default, the CLI's flags)."""
    phase = Serve.parse(phase, words.of_option("phase"))
    if context is not None and context < 1:
        raise UsageError(f"{words.of_option('context')} must be a positive number of cached tokens, not {context}")
    if phase is Serve.PREFILL and context is None:
        return network.doc
    memories = _memories(network)
    if memories and phase is Serve.DECODE:
        network = Network(decoder_doc(network.doc, memories, words.of_option("phase")))
    _check_servable(network, phase, words.of_option("phase"), bool(memories))
    doc = network.doc
    data: Any = copy.deepcopy(doc.data)
    name = context_dim(doc)
    if context is None:  # decode after a prompt of the spec's own length
        context = int(network.in_shape[1].xreplace(network.dims.values())) if network.in_shape[1].free_symbols \
            else int(network.in_shape[1])
    data.setdefault("dims", {})[name] = {"value": context, "doc": "tokens already in the key/value cache (--context)"}
    if phase is Serve.DECODE:
        data["input"] = [*data["input"][:1], 1, *data["input"][2:]]
    for path in ("blocks", "layers"):
        if path in data:
            _add_cache(data[path], name, doc, (path,), words.of_option("context"), bool(memories))
    return MarkedDoc(doc.file, data, doc.marks)


def _memories(network: Network) -> dict[str, str]:
    """Cross-attention's key/value sources: {value name: its token count} (an encoder-decoder's encoder states)."""
    return {str(n.call.attrs.kv): str(n.call.wiring.extra[0][1]) for n in network.op_nodes()
            if n.op.name == "attention" and n.call.attrs.kv is not None}


def _saves(node: Any, names: dict) -> bool:
    if isinstance(node, list):
        return any(_saves(item, names) for item in node)
    if isinstance(node, dict):
        return node.get("save") in names or any(_saves(v, names) for v in node.values())
    return False


def decoder_doc(doc: MarkedDoc, memories: dict[str, str], flag: str) -> MarkedDoc:
    """An encoder-decoder's decode step as transformers runs it with a cache: the encoder's layers (every top-level
    layer up to the one saving the states cross-attention reads) dropped, their output cached; the decoder's token
    input (the first layer after them reads it by `input:`) made the spec's input; every cross-attention reading
    cached keys and values of the encoder's tokens (`kv_cache`: no k/v projections run)."""
    data: Any = copy.deepcopy(doc.data)
    layers = data.get("layers") or []
    last = max((i for i, item in enumerate(layers) if _saves(item, memories)), default=None)
    rest = layers[last + 1:] if last is not None else []
    inputs = data.get("inputs") or {}
    first = rest[0] if rest and isinstance(rest[0], dict) else {}
    if last is None or first.get("input") not in inputs:
        raise UsageError(f"{flag} decode serves an encoder-decoder by dropping its encoder (the top-level layers up "
                         f"to the one that saves {' / '.join(sorted(memories))}, which cross-attention reads) and "
                         "running the decoder on its token input (the next layer's `input:`, a name under "
                         "`inputs:`); this spec is not laid out that way")
    tokens = first.pop("input")
    data["input"] = inputs.pop(tokens)
    if not inputs:
        data.pop("inputs", None)
    data["layers"] = rest
    _own_table(layers[:last + 1], rest)
    for path in ("blocks", "layers"):
        if path in data:
            _cache_cross(data[path], memories)
    return MarkedDoc(doc.file, data, _moved_marks(doc.marks, last + 1, tokens))


def _moved_marks(marks: dict[tuple, tuple[int, int]], dropped: int, tokens: str) -> dict[tuple, tuple[int, int]]:
    """The source positions of the decoder's document: its layers `dropped` places earlier, its input where the
    named input was (so an error in the decode step points at the line that wrote it)."""
    out = {}
    for path, mark in marks.items():
        if path[:1] == ("layers",) and len(path) > 1 and isinstance(path[1], int):
            if path[1] >= dropped:
                out[("layers", path[1] - dropped, *path[2:])] = mark
        elif path[:2] == ("inputs", tokens):
            out[("input", *path[2:])] = mark
        elif path[:1] != ("input",):
            out[path] = mark
    return out


def _embeddings(layers: list) -> list[dict]:
    return [item["embedding"] for item in layers if isinstance(item, dict) and isinstance(item.get("embedding"), dict)]


def _own_table(dropped: list, kept: list) -> None:
    """The decoder's token embedding holds the table when the dropped encoder held it (a table shared by the
    encoder's and decoder's lookups and the LM head: the decoder's lookup and a tied head read it)."""
    if any(not e.get("tied") for e in _embeddings(dropped)) and all(e.get("tied") for e in _embeddings(kept)):
        for table in _embeddings(kept)[:1]:
            table.pop("tied")


def _cache_cross(node: Any, memories: dict[str, str]) -> None:
    if isinstance(node, list):
        for item in node:
            _cache_cross(item, memories)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key == "attention" and isinstance(value, dict) and value.get("kv") in memories:
                node[key] = {**{k: v for k, v in value.items() if k != "kv"}, "kv_cache": memories[value["kv"]]}
            else:
                _cache_cross(value, memories)


BACKEND_OPS = ("attention", "mla")  # the ops with a `backend` attribute (the SDPA kernel family)


def backend_doc(doc: MarkedDoc, backend: Backend | str | None, words: Wording = API_WORDS) -> MarkedDoc:
    """`doc` with `backend: <backend>` on every attention and mla layer (`--backend`: it replaces the
    layers' own choice); `doc` itself for None."""
    if backend is None:
        return doc
    backend = Backend.parse(backend, words.of_option("backend"))
    data: Any = copy.deepcopy(doc.data)
    for path in ("blocks", "layers"):
        if path in data:
            _set_attr(data[path], BACKEND_OPS, "backend", str(backend))
    return MarkedDoc(doc.file, data, doc.marks)


def _set_attr(node: Any, ops: tuple[str, ...], attr: str, value: str) -> None:
    if isinstance(node, list):
        for item in node:
            _set_attr(item, ops, attr, value)
    elif isinstance(node, dict):
        for key, child in node.items():
            if key in ops and (child is None or isinstance(child, dict)):
                node[key] = {**(child or {}), attr: value}
            else:
                _set_attr(child, ops, attr, value)


def _check_servable(network: Network, phase: Serve, flag: str, encoder: bool) -> None:
    if len(network.in_shape) < 2:
        raise UsageError(f"{flag} {phase} needs an input of tokens ([B, S] ids or [B, S, C]); this spec's input has "
                         f"rank {len(network.in_shape)}")
    ops = list(network.op_nodes())
    if not any(n.op.name in CACHED_OPS and n.call.attrs.causal for n in ops):
        raise UsageError(f"{flag} {phase} serves a decoder: this spec has no causal attention layer, so nothing is "
                         "cached")
    if phase is Serve.DECODE:
        for node in ops:
            if node.op.name not in PER_TOKEN_OPS:
                raise UsageError(f"{flag} decode: layer '{node.name}' ({node.op.name}) mixes tokens in a way a key/"
                                 f"value cache does not model; decode covers causal attention and per-token layers "
                                 f"({', '.join(sorted(PER_TOKEN_OPS))})")
    for node in ops:
        if node.op.name == "attention" and node.call.attrs.kv is not None and not encoder:
            raise UsageError(f"{flag} {phase}: layer '{node.name}' is cross-attention, whose cached encoder keys "
                             "and values are not modelled; serve the decoder without it")


def _add_cache(node: Any, name: str, doc: MarkedDoc, path: tuple, flag: str, causal_only: bool = False) -> None:
    """Set `cache: name` on every attention layer under `node` (a spec's blocks or layers); `causal_only`: on
    causal ones only (an encoder-decoder: its encoder and cross-attention have no self-attention cache)."""
    if isinstance(node, list):
        for i, item in enumerate(node):
            _add_cache(item, name, doc, path + (i,), flag, causal_only)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in CACHED_OPS and (value is None or isinstance(value, dict)):
                if causal_only and not (value or {}).get("causal"):
                    continue
                attrs = dict(value or {})
                if "cache" in attrs:
                    raise UsageError(f"{doc.locate(path + (key, 'cache'))}: the layer sets cache itself; {flag} "
                                     "sets it on every attention layer: drop one")
                attrs["cache"] = name
                node[key] = attrs
            else:
                _add_cache(value, name, doc, path + (key,), flag, causal_only)


__all__ = ["BACKEND_OPS", "CACHED_OPS", "CONTEXT_DIMS", "PER_TOKEN_OPS", "backend_doc", "context_dim", "serving_doc"]
