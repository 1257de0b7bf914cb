"""The LM head of the decoder families, added or dropped on the spec text, the same way for every family.

A decoder family writes either its backbone (transformers' `*Model`: sources relative to it) or its whole
causal LM (`*ForCausalLM`: the backbone under an attribute, `model.` / `transformer.` / `gpt_neox.`, and the
head beside it); its `CausalLM` says which and names both classes. `import hf` describes the whole causal LM
by default (`whole`: the backbone's top-level sources and `ignore:` modules moved under the attribute, the head
appended, tied or not as `tie_word_embeddings` says) and the backbone with `--backbone` (`backbone`: the
head's layers cut, the sources moved back to the root). Each function keeps the text's layout and comments.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

from costspec.importer.config import HFConfig

_TOP_KEY = re.compile(r"^[A-Za-z_]+:")
_INLINE_SOURCE = re.compile(r"(\bsource: )([^,}\s]+)")
_MODULE = re.compile(r'^(\s*-?\s*module: )"([^"]*)"(.*)$')


@dataclass(frozen=True)
class CausalLM:
    """A decoder family's two transformers classes: `whole` (the causal LM, `*ForCausalLM`) and `backbone`
    (`*Model`, the attribute `prefix` of `whole`); `writes`: what the family's build writes (backbone | whole).
    `tied_default`: transformers' tie_word_embeddings default; `head`: the head's module in `whole`;
    `bias`: the head adds a bias (Phi)."""

    whole: str
    backbone: str
    prefix: str
    writes: str = "backbone"
    tied_default: bool = False
    head: str = "lm_head"
    bias: bool = False

    def described(self, backbone: bool) -> str:
        """The class a spec imported with (or without) --backbone describes."""
        return self.backbone if backbone else self.whole


CAUSAL_SUFFIXES = {"ForCausalLM": "Model", "LMHeadModel": "Model"}  # LlamaForCausalLM -> LlamaModel


def inferred(hf_class: str) -> CausalLM | None:
    """A family that declares no `CausalLM` but describes a causal LM by its class name (`*ForCausalLM`,
    `*LMHeadModel`): it writes the whole model; the backbone's attribute is read from the spec's sources."""
    for suffix, backbone in CAUSAL_SUFFIXES.items():
        if hf_class.endswith(suffix) and len(hf_class) > len(suffix):
            return CausalLM(hf_class, hf_class[:-len(suffix)] + backbone, "", writes="whole")
    return None


def _prefix(text: _Text, lm: CausalLM) -> str:
    """The attribute every top-level source but the head's starts with (`model`, `transformer`, `backbone`)."""
    start, end = text.span("layers")
    sources = [line[len("    source: "):].strip() for line in text.lines[start + 1:end]
               if line.startswith("    source: ")]
    sources += re.findall(r"\bsource: ([^,}\s]+)", "\n".join(line for line in text.lines[start + 1:end]
                                                         if line.startswith("  - {")))
    firsts = {s.split(".", 1)[0] for s in sources if s != lm.head}
    if len(firsts) != 1:
        raise RuntimeError(f"the {lm.whole} importer's top-level sources do not share one backbone attribute "
                           f"({sorted(firsts)}): declare its CausalLM")
    return firsts.pop()


@dataclass
class _Text:
    """The spec text as lines, with the span of each top-level key."""

    lines: list[str]

    def span(self, key: str) -> tuple[int, int]:
        """[start, end) of the top-level `key:` section (start: the key's own line); (-1, -1) when absent."""
        start = next((i for i, line in enumerate(self.lines) if line.startswith(f"{key}:")), -1)
        if start < 0:
            return -1, -1
        end = next((i for i in range(start + 1, len(self.lines)) if _TOP_KEY.match(self.lines[i])), len(self.lines))
        return start, end

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _move(path: str, lm: CausalLM, into: bool) -> str | None:
    """A module path of the backbone as the whole model names it (`into`), or back; None: not under it."""
    if into:
        return f"{lm.prefix}.{path}" if path else lm.prefix
    if path == lm.prefix:
        return ""
    return path[len(lm.prefix) + 1:] if path.startswith(lm.prefix + ".") else None


def _move_sources(text: _Text, lm: CausalLM, into: bool) -> None:
    """The top-level layers' sources (the nested ones are relative to their parent) moved under / out of the
    backbone's attribute; a source outside it (the head) is left for `_cut_head`."""
    start, end = text.span("layers")
    for i in range(start + 1, end):
        line = text.lines[i]
        if line.startswith("    source: "):
            moved = _move(line[len("    source: "):].strip(), lm, into)
            if moved is not None:
                text.lines[i] = f"    source: {moved}" if moved else "    source: \"\""
        elif line.startswith("  - {") and "source: " in line:
            def sub(match: re.Match) -> str:
                moved = _move(match.group(2), lm, into)
                return match.group(0) if moved is None else f"{match.group(1)}{moved or chr(34) * 2}"
            text.lines[i] = _INLINE_SOURCE.sub(sub, line)


def _move_ignores(text: _Text, lm: CausalLM, into: bool) -> None:
    """Each `ignore:` entry's module moved with the sources; an entry about a module outside the backbone
    (the head) is dropped with it (`into` False only)."""
    start, end = text.span("ignore")
    if start < 0:
        return
    entries: list[list[str]] = []
    for line in text.lines[start + 1:end]:
        if line.startswith("  - ") or not entries:
            entries.append([line])
        else:
            entries[-1].append(line)
    kept: list[str] = []
    for entry in entries:
        match = _MODULE.match(entry[0])
        if match is None:
            kept.extend(entry)
            continue
        moved = _move(match.group(2), lm, into)
        if moved is not None:
            kept.append(f'{match.group(1)}"{moved}"{match.group(3)}')
            kept.extend(entry[1:])
    text.lines[start + 1:end] = kept
    if not kept:
        del text.lines[start]


def _rename(text: _Text, old: str, new: str) -> None:
    """`transformers' OLD` in the header, source and comments: the class the spec now describes."""
    text.lines = [line.replace(f"transformers' {old}", f"transformers' {new}") for line in text.lines]


def _add_to_doc(text: _Text, words: str) -> None:
    """`words` appended to the folded `doc:` (its last line)."""
    start, end = text.span("doc")
    if start >= 0 and text.lines[start].rstrip() == "doc: >-" and end > start + 1:
        text.lines[end - 1] = text.lines[end - 1].rstrip().rstrip(".") + words


def whole(spec: str, lm: CausalLM, cfg: HFConfig) -> str:
    """A backbone's spec text as the whole causal LM: sources under `lm.prefix`, the head appended."""
    text = _Text(spec.rstrip("\n").split("\n"))
    _move_sources(text, lm, into=True)
    _move_ignores(text, lm, into=True)
    _rename(text, lm.backbone, lm.whole)
    tied = cfg.get_bool("tie_word_embeddings", lm.tied_default)
    attrs = "vocab: V" + (", tied: true" if tied else "") + (", bias: true" if lm.bias else "")
    said = f"tie_word_embeddings: {'true (shares the embedding)' if tied else 'false'}"
    if not cfg.has("tie_word_embeddings"):
        said = f"{said} ({lm.whole}'s default)"
    text.lines += [f"  - lm_head: {{{attrs}}}  # {said}", f"    source: {lm.head}"]
    _add_to_doc(text, f", then the LM head of transformers' {lm.whole}" + (" (tied to the embedding)" if tied else ""))
    return text.text()


def backbone(spec: str, lm: CausalLM) -> str:
    """A whole causal LM's spec text as its backbone: the head's layers cut (the first top-level `lm_head`
    and everything after it: logit scales, soft-caps), the sources moved back to the root."""
    text = _Text(spec.rstrip("\n").split("\n"))
    if not lm.prefix:
        lm = replace(lm, prefix=_prefix(text, lm))
    start, end = text.span("layers")
    head = next((i for i in range(start + 1, end) if text.lines[i].startswith("  - lm_head:")), -1)
    if head < 0:
        raise RuntimeError(f"the {lm.whole} importer wrote no top-level lm_head to drop")
    while head > start + 1 and text.lines[head - 1].startswith("  #"):
        head -= 1  # a comment that introduces the head belongs to it
    del text.lines[head:end]
    _move_sources(text, lm, into=False)
    _move_ignores(text, lm, into=False)
    _rename(text, lm.whole, lm.backbone)
    _add_to_doc(text, f" (imported with --backbone: transformers' {lm.backbone}, without the LM head)")
    return text.text()
