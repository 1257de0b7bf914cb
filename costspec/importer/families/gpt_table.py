"""The GPT-like template's table: one row per family (gpt_template.GptLike), each defined beside the reader of
its switches and its named rules in its own module (decoders.py, neox.py, gptj.py, falcon.py, bloom.py,
opt.py). A new GPT-like family is a row plus its reader and its test."""
from __future__ import annotations

from costspec.importer.families import bloom, decoders, falcon, gptj, neox, opt
from costspec.importer.families.gpt_template import GptLike

GPT_LIKE: tuple[GptLike, ...] = (decoders.GPT2_TABLE, neox.NEOX_TABLE, gptj.TABLE, falcon.TABLE, bloom.TABLE,
                                 opt.TABLE)
