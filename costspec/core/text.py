"""Spec-provided text (names, docs) is data: each output format gets it escaped here, never raw.

The spec loader already refuses control characters outside `doc`/`source` (spec/yaml_marks.py);
these functions are the second line, applied where text is rendered, so a name can never end a
LaTeX comment, open a markdown link or move a terminal's cursor, whatever produced it.
"""
from __future__ import annotations

import re
import unicodedata

# C0 and C1 controls, DEL, line/paragraph separators, bidirectional overrides and isolates
# (text that reorders what a reader sees: "Trojan Source"), zero-width and BOM characters.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\u200b-\u200f\ufeff]")
_MARKDOWN = re.compile(r"([\\`*_{}\[\]<>()#+\-.!|~])")


def unsafe_chars(text: str, allow: str = "") -> list[str]:
    """The characters of `text` that may not appear in it raw (those in `allow` excepted)."""
    return [ch for ch in _UNSAFE.findall(text) if ch not in allow]


def _visible(ch: str) -> str:
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch, f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else
                                                      f"\\u{ord(ch):04x}")


def for_terminal(text: str) -> str:
    """`text` with every control / reordering character shown as an escape (\\x1b, \\r, \\u202e)."""
    return _UNSAFE.sub(lambda m: _visible(m.group()), str(text))


def for_markdown(text: str) -> str:
    """`text` as literal markdown text: controls escaped, markdown/HTML punctuation backslash-escaped."""
    return _MARKDOWN.sub(r"\\\1", for_terminal(text))


def for_markdown_code(text: str) -> str:
    """`text` as an inline code span that is also safe inside a table cell."""
    body = for_terminal(text).replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", body)), default=0) + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def for_latex_comment(text: str) -> str:
    """`text` safe after a `%`: one line (controls escaped), and no `^^` (TeX reads `^^M` as an end of
    line before it reads the comment)."""
    return re.sub(r"\^(?=\^)", "^ ", for_terminal(text))


def for_latex_text(text: str) -> str:
    """`text` controls escaped, ready for a text-mode escape of LaTeX specials (export/latex.py tex_escape)."""
    return for_terminal(text)


def lookalike(name: str) -> str | None:
    """The ASCII identifier a non-ASCII `name` reads as (Python folds NFKC: ℂ, Ｃ and 𝐂 are C), or None."""
    folded = unicodedata.normalize("NFKC", name)
    return folded if folded != name and folded.isascii() else None
