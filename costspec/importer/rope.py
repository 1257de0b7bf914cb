"""RoPE's settings, read the same way by every family with rotary embeddings: `rope_parameters` (transformers
5) or `rope_scaling` (older configs), one table or one per layer kind (Gemma 3: full_attention /
sliding_attention).

Every rope_type transformers 5 has (default, linear, dynamic, yarn, llama3, longrope) only changes the
inverse frequencies, constants of the cos / sin tables: RoPE costs 2 mul + 1 add per rotated element
whatever they are, so the type never changes a FLOP (`header` says so in the imported spec). Dynamic and
LongRoPE pick their frequencies from max(position_ids) at run time; `validate --against` on meta runs them
with the frequencies they were built with (against/target.py)."""
from __future__ import annotations

from typing import Any

from costspec.importer.config import HFConfig

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")
RUN_TIME = ("dynamic", "longrope")  # frequencies chosen from the positions in the forward
# the keys of a rope table: the type, the base, and each type's frequency parameters (constants)
FREQUENCY_KEYS = frozenset({
    "rope_type", "type", "rope_theta", "factor", "original_max_position_embeddings", "low_freq_factor",
    "high_freq_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "truncate",
    "short_factor", "long_factor", "short_mscale", "long_mscale"})
KEYS = ("rope_parameters", "rope_scaling")


def tables(cfg: HFConfig, key: str) -> list[dict[str, Any]]:
    """The rope tables of `key` (one, or one per layer kind); not an object: an ImportProblem."""
    value = cfg.get(key)
    if value is None:
        return []
    if not isinstance(value, dict):
        raise cfg.refuse(key, "expected an object with rope_type (and rope_theta)")
    if value and all(isinstance(v, dict) for v in value.values()):
        return list(value.values())
    return [value]


def kind(table: dict[str, Any]) -> str:
    name = table.get("rope_type", table.get("type", "default"))
    return name if isinstance(name, str) else repr(name)


def read(cfg: HFConfig, extra: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Every rope table of the config, checked: a known rope_type, and no key beyond the frequency keys
    and `extra` (partial_rotary_factor where the family rotates part of the head); rope_theta read."""
    cfg.get("rope_theta")
    out = []
    for key in KEYS:
        for table in tables(cfg, key):
            name = kind(table)
            if name not in ROPE_TYPES:
                raise cfg.refuse(key, f"RoPE {name!r} is not a rope_type transformers 5 has (expected one of "
                                 f"{', '.join(ROPE_TYPES)})")
            unknown = sorted(set(table) - FREQUENCY_KEYS - extra)
            if unknown:
                raise cfg.refuse(key, f"{', '.join(unknown)}: not a RoPE frequency key this family reads (known: "
                                 f"{', '.join(sorted(FREQUENCY_KEYS | extra))})")
            out.append(table)
    return out


def header(data: dict[str, Any]) -> list[str]:
    """The comment lines an imported spec's header carries for a rope_type other than default (read from the
    raw config: every family, whether or not it reads RoPE)."""
    kinds: list[str] = []
    for key in KEYS:
        value = data.get(key)
        if not isinstance(value, dict):
            continue
        for table in value.values() if value and all(isinstance(v, dict) for v in value.values()) else [value]:
            name = kind(table)
            if name != "default" and name not in kinds:
                kinds.append(name)
    if not kinds:
        return []
    lines = [f"# RoPE {'/'.join(kinds)}: its frequencies are constants of the cos / sin tables, so the FLOPs are "
             "those of default RoPE"]
    if any(k in RUN_TIME for k in kinds):
        lines.append("# (chosen from max(position_ids) at run time; validate --against on meta runs the frequencies "
                     "it was built with)")
    return lines
