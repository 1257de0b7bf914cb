"""A Hugging Face `config.json`, read as JSON (never through transformers), that remembers which
keys the importer read, so a key nobody understood is an error instead of a silently wrong spec.

It is also the one place config values are validated. Each family declares the numeric keys it
reads (`Family.keys`: `size`, `count`, `layers`, `heads`, dotted for a nested config); before the
family writes anything, `HFConfig.validate` checks every declared key the config holds: its type
(a whole number, or a list of them), its range, and the divisibility the spec's ops need (heads
divide the width unless a head_dim is given; a head dim that RoPE rotates is even), each error
naming the key. The typed getters bound whatever else is read (`get_int`: at most MAX_CONFIG_INT;
a dtype that is no string is an error, not a crash).

A key the config does not hold is read as transformers reads it: the config class's default, from
costspec/data/hf_defaults.json (written by tools/gen_hf_defaults.py from the pinned transformers; the
importer never imports it), recorded as assumed (`assumed()`: the header and `--format json` list it).
Only an ABSENT key takes the class default: a key the config holds as null keeps the family's meaning
of null (head_dim, sliding_window). A key without a class default (null, derived by the class from other
keys) or a model type not in the table takes the family's default, or is refused as missing.
"""
from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from costspec.core.budget import MAX_REAL_LAYERS
from costspec.core.conventions import DTYPES
from costspec.core.errors import CostspecError

MAX_CONFIG_INT = 2**31 - 1  # a width, count or length in a config (transformers' own are int32-sized)
MAX_CONFIG_LAYERS = MAX_REAL_LAYERS  # layers of one stack (or all stages summed): what validate --against builds

# Keys every PretrainedConfig carries that never change a cost: bookkeeping, generation settings,
# label maps, initialisation, numerical epsilons, dropout (costspec counts the model in eval mode,
# where dropout is the identity), the attention backend (the same matmuls either way).
GENERIC_KEYS = frozenset({
    "_name_or_path", "architectures", "transformers_version", "model_type", "dtype", "torch_dtype",
    "id2label", "label2id", "num_labels", "problem_type", "finetuning_task", "tokenizer_class", "prefix",
    "task_specific_params", "output_hidden_states", "output_attentions", "return_dict", "torchscript",
    "use_bfloat16", "tf_legacy_loss", "use_cache", "initializer_range", "initializer_factor",
    "chunk_size_feed_forward", "attn_implementation", "_attn_implementation", "_commit_hash",
    "_attn_implementation_autoset", "max_length", "min_length", "do_sample", "early_stopping", "num_beams",
    "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
    "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens", "gradient_checkpointing",
})
GENERIC_PATTERN = re.compile(r".*(_token_id|_token_ids|_eps|_epsilon|dropout|_pdrop|dropout_prob|dropout_rate)$")
# Keys whose default (false, null, empty) changes nothing; any other value needs a family that reads it.
GENERIC_WHEN_FALSY = frozenset({
    "is_encoder_decoder", "is_decoder", "add_cross_attention", "cross_attention_hidden_size", "pruned_heads",
    "tie_encoder_decoder",
})

TORCH_DTYPE_NAMES = {"float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16"}
DEFAULT_DTYPE = "fp32"  # what transformers loads a model in when the config names no dtype


@functools.cache
def class_defaults() -> dict[str, Any]:
    """model_type -> {class, sub_configs, defaults}: transformers' config classes' defaults (module docstring)."""
    text = resources.files("costspec.data").joinpath("hf_defaults.json").read_text(encoding="utf-8")
    table: dict[str, Any] = json.loads(text)["model_types"]
    return table


def _class_default(kind: str | None, key: str) -> tuple[Any, str] | None:
    """(the default, the class) of `key` in the config class of model type `kind`, or None when it has none."""
    entry = class_defaults().get(kind) if kind else None
    if entry is None or key not in entry["defaults"]:
        return None
    return entry["defaults"][key], entry["class"]


def _sub_kind(kind: str | None, key: str, nested: Any) -> str | None:
    """The model type of the nested config `key` (its own model_type, else the one its parent class nests)."""
    named = nested.get("model_type") if isinstance(nested, Mapping) else None
    if isinstance(named, str) and named in class_defaults():
        return named
    entry = class_defaults().get(kind) if kind else None
    found = entry["sub_configs"].get(key) if entry is not None else None
    return found if isinstance(found, str) else None


class ImportProblem(CostspecError):
    """A config the importer cannot turn into a correct spec: names the file and the key."""


_MISSING: Any = object()


@dataclass(frozen=True)
class Key:
    """A numeric config key a family reads: a whole number (with `items`, a list of them) in
    [minimum, maximum] (with `total`, the list's sum too); with `divides`, it divides that key's value,
    and with `even_quotient`, that quotient is even (unless the key `unless`, a head_dim, is given)."""

    name: str  # dotted for a nested config's key: vision_config.hidden_size
    minimum: int = 1
    maximum: int = MAX_CONFIG_INT
    items: bool = False
    total: bool = False
    divides: str | None = None
    unless: str | None = None
    even_quotient: bool = False
    even: bool = False
    real: bool = False  # a finite number > 0 (a ratio) rather than a whole number


MAX_RATIO = 1024  # a ratio of two widths (mlp_ratio)


def ratio(name: str) -> Key:
    """A ratio of widths (mlp_ratio): a number > 0 and at most MAX_RATIO."""
    return Key(name, 0, MAX_RATIO, real=True)


def size(name: str, *, minimum: int = 1, items: bool = False, even: bool = False) -> Key:
    """A width, length, vocabulary or image size."""
    return Key(name, minimum, MAX_CONFIG_INT, items, even=even)


def count(name: str, *, minimum: int = 0, maximum: int = MAX_CONFIG_INT, items: bool = False) -> Key:
    """A count that may be 0 (a window, a layer index, a number of experts)."""
    return Key(name, minimum, maximum, items)


def layers(name: str, *, items: bool = False) -> Key:
    """A number of layers (or, with `items`, one per stage): at most MAX_CONFIG_LAYERS in all."""
    return Key(name, 1 if not items else 0, MAX_CONFIG_LAYERS, items, total=True)


def heads(name: str, of: str, *, unless: str | None = None, rope: bool = False, items: bool = False) -> Key:
    """A number of attention heads that divides the width `of` (costspec's attention splits the width
    into heads); with `rope`, the head dim width / heads is even (RoPE rotates pairs) unless `unless`,
    an explicit head_dim, is given (declared `even` itself)."""
    return Key(name, 1, MAX_CONFIG_INT, items, divides=of, unless=unless, even_quotient=rope)


def under(prefix: str, keys: Iterable[Key]) -> tuple[Key, ...]:
    """`keys` as the keys of a nested config (`vision_config.hidden_size`)."""
    def moved(name: str | None) -> str | None:
        return None if name is None else f"{prefix}.{name}"

    return tuple(Key(moved(k.name) or k.name, k.minimum, k.maximum, k.items, k.total, moved(k.divides),
                     moved(k.unless), k.even_quotient, k.even, k.real) for k in keys)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _in_range(key: Key, value: Any) -> bool:
    if key.real:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= key.maximum
    return _whole(value) and key.minimum <= value <= key.maximum


class HFConfig:
    """A read-only view of one config dict (or one nested sub-config such as `vision_config`)."""

    def __init__(self, data: Mapping[str, Any], path: str, prefix: str = "", dtype: str | None = None,
                 name: str = "", kind: str | None = None):
        if not isinstance(data, Mapping):
            raise ImportProblem(f"{path}: expected a JSON object (a Hugging Face config.json)")
        self._data = dict(data)
        named = self._data.get("model_type")
        # whose class defaults fill the keys it lacks: its own model_type, else what its parent class nests
        self.kind = kind or (named if isinstance(named, str) and named in class_defaults() else None)
        self.path = path
        self._prefix = prefix
        self._read: set[str] = set()
        self._subs: dict[str, HFConfig] = {}
        self._dtype_override = dtype
        self.name = name or str(self._data.get("model_type") or "imported")  # the spec's name
        self.checked = False  # set by check_understood: the core refuses a family that never checks
        self.ignored: dict[str, str] = {}  # keys the family declared cost-free, with its reasons (docs/import.md)
        self.backbone = False  # --backbone: a causal LM without its LM head (importer/head.py drops it)
        self.tower: str | None = None  # --tower vision|text|both: which towers of a dual-tower model (None: default)
        self.pooler = True  # False: --no-pooler, the spec ends before the pooler the model's class builds
        self._defaulted: dict[str, Any] = {}  # keys read that the config lacks: the default the family assumed
        self._from_class: dict[str, str] = {}  # keys read that the config lacks, taken from this config class
        self._views: list[HFConfig] = []  # configs built from this one's data by a family (view()): their assumptions

    # -- reading ---------------------------------------------------------------------------------
    def where(self, key: str) -> str:
        """`file: key` as messages name it (nested keys dotted: vision_config.hidden_size)."""
        return f"{self.path}: {self._prefix}{key}"

    @property
    def data(self) -> dict[str, Any]:
        """The config as read (a copy: reading it marks no key read)."""
        return dict(self._data)

    def has(self, key: str) -> bool:
        return key in self._data

    def _absent(self, key: str) -> tuple[Any, str] | None:
        """The class default of `key` when the config does not hold it (recorded as assumed), else None."""
        if key in self._data:
            return None
        known = _class_default(self.kind, key)
        if known is not None:
            self._defaulted[key], self._from_class[key] = known
        return known

    def get(self, key: str, default: Any = None) -> Any:
        """The value of `key` (read); when the config lacks it, the config class's default (if it has one);
        else (or when the config holds null) `default`."""
        self._read.add(key)
        known = self._absent(key)
        if known is not None:
            return known[0]
        value = self._data.get(key)
        if value is None and default is not None:
            self._defaulted[key] = default
        return default if value is None else value

    def require(self, key: str) -> Any:
        """The value of `key`; a config without it is an ImportProblem."""
        self._read.add(key)
        known = self._absent(key)
        if known is not None:
            return known[0]
        if self._data.get(key) is None:
            raise ImportProblem(f"{self.where(key)}: missing (the importer needs it)")
        return self._data[key]

    def get_int(self, key: str, default: int | None = _MISSING, minimum: int = 1,
                maximum: int = MAX_CONFIG_INT) -> int:
        """A whole number in [minimum, maximum] (a missing key: `default`, or an error when none is given)."""
        value = self.require(key) if default is _MISSING else self.get(key, default)
        if not _whole(value) or not minimum <= value <= maximum:
            raise ImportProblem(f"{self.where(key)} = {_shown(value)}: expected a whole number >= {minimum} "
                                f"(at most {maximum:,})")
        return value

    def get_bool(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise ImportProblem(f"{self.where(key)} = {value!r}: expected true or false")
        return value

    def get_str(self, key: str, default: str | None = _MISSING) -> str:
        value = self.require(key) if default is _MISSING else self.get(key, default)
        if not isinstance(value, str):
            raise ImportProblem(f"{self.where(key)} = {value!r}: expected a string")
        return value

    def choice(self, key: str, default: str, allowed: Iterable[str], why: str = "") -> str:
        """A string value that must be one of `allowed` (what the importer knows how to price)."""
        value = self.get_str(key, default)
        allowed = list(allowed)
        if value not in allowed:
            raise ImportProblem(f"{self.where(key)} = {value!r}: not supported by this importer (expected one of "
                                f"{', '.join(allowed)}){': ' + why if why else ''}")
        return value

    def refuse(self, key: str, why: str) -> ImportProblem:
        """An ImportProblem for a value the importer cannot price (the caller raises it)."""
        self._read.add(key)
        return ImportProblem(f"{self.where(key)} = {self._data.get(key)!r}: {why}")

    def sub(self, key: str) -> HFConfig:
        """A nested config (`vision_config`, `text_config`); its keys are checked as this one's are."""
        self._read.add(key)
        if key not in self._subs:
            value = self._data.get(key)
            if not isinstance(value, Mapping):
                raise ImportProblem(f"{self.where(key)}: expected a nested config object, got {value!r}")
            self._subs[key] = HFConfig(value, self.path, f"{self._prefix}{key}.", self._dtype_override,
                                       kind=_sub_kind(self.kind, key, value))
        return self._subs[key]

    def view(self, data: Mapping[str, Any], key: str = "") -> HFConfig:
        """A config a family builds from this one's nested config `key` (or, key "", from this one), keys of its
        own added: read with the class defaults of the type `key` nests (this one's), its assumptions reported
        with this config's."""
        nested = self._data.get(key)
        kind = _sub_kind(self.kind, key, nested if isinstance(nested, Mapping) else {}) if key else self.kind
        out = HFConfig(data, self.path, f"{self._prefix}{key}." if key else self._prefix,
                       self.dtype if self.dtype_source == "--dtype" else None, self.name, kind)
        self._views.append(out)
        return out

    # -- validating the declared keys ------------------------------------------------------------
    def _lookup(self, dotted: str) -> Any:
        """The value of a dotted key, the class default where the config lacks it (nothing marked read)."""
        value: Any = self._data
        kind = self.kind
        for part in dotted.split("."):
            if not isinstance(value, Mapping):
                return None
            known = _class_default(kind, part) if part not in value else None
            nested = value.get(part) if known is None else known[0]
            kind, value = _sub_kind(kind, part, nested), nested
        return value

    def validate(self, keys: Iterable[Key]) -> None:
        """Check every declared key the config holds or its class defaults (module docstring); an ImportProblem
        names the first one that fails. Keys without either (or held as null) are left to the family's defaults."""
        keys = list(keys)
        for key in keys:
            value = self._lookup(key.name)
            if value is None:
                continue
            values = value if key.items and isinstance(value, list) else [value]
            wanted = (f"a number > 0 (at most {key.maximum:,})" if key.real
                      else f"a whole number >= {key.minimum} (at most {key.maximum:,})")
            for item in values:
                if not _in_range(key, item):
                    raise ImportProblem(f"{self.path}: {key.name} = {_shown(value)}: expected "
                                        f"{wanted}{' in each entry' if isinstance(value, list) else ''}")
            if key.total and sum(values) > key.maximum:
                raise ImportProblem(f"{self.path}: {key.name} = {_shown(value)}: {sum(values):,} layers in all "
                                    f"(expected at most {key.maximum:,})")
            if key.even and any(v % 2 for v in values):
                raise ImportProblem(f"{self.path}: {key.name} = {value}: expected an even number (RoPE rotates "
                                    "pairs of channels)")
        for key in keys:
            value, width = self._lookup(key.name), self._lookup(key.divides) if key.divides else None
            if key.divides is None or not _whole(value) or not _whole(width):
                continue
            if width % value and "heads" in key.divides:  # key/value heads in groups of query heads
                raise ImportProblem(f"{self.path}: {key.name} = {value} does not divide {key.divides} = {width} "
                                    f"(expected {key.divides} / {key.name} query heads per key/value head)")
            if width % value:
                raise ImportProblem(f"{self.path}: {key.divides} = {width} is not a multiple of {key.name} = {value} "
                                    f"(expected head dim = {key.divides} / {key.name}, a whole number)")
            if key.even_quotient and (width // value) % 2 and (key.unless is None or self._lookup(key.unless) is None):
                raise ImportProblem(f"{self.path}: {key.divides} / {key.name} = {width // value} is odd (expected an "
                                    "even head dim: RoPE rotates pairs of channels)")

    @property
    def model_type(self) -> str:
        return self.get_str("model_type", "")

    @property
    def dtype(self) -> str:
        """The spec's precision: --dtype if given, else the config's `torch_dtype` (`dtype` since
        transformers 5), else fp32 (what transformers loads such a model in)."""
        if self._dtype_override is not None:
            return self._dtype_override
        for key in ("torch_dtype", "dtype"):
            name = self._data.get(key)
            if name is None:
                continue
            if not isinstance(name, str) or name not in TORCH_DTYPE_NAMES:
                raise ImportProblem(f"{self.where(key)} = {_shown(name)}: expected one of "
                                    f"{', '.join(TORCH_DTYPE_NAMES)} (or pass --dtype, one of {', '.join(DTYPES)})")
            return TORCH_DTYPE_NAMES[name]
        return DEFAULT_DTYPE

    @property
    def dtype_source(self) -> str:
        """Where `dtype` came from, for the spec's comment (after `dtype` accepted it: a known name)."""
        if self._dtype_override is not None:
            return "--dtype"
        for key in ("torch_dtype", "dtype"):
            if isinstance(self._data.get(key), str):
                return f"{key}: {self._data[key]}"
        return "the config names no dtype: transformers' default float32"

    # -- checking --------------------------------------------------------------------------------
    def unread(self, ignored: Iterable[str] = ()) -> list[str]:
        """Keys present here (and in the sub-configs read) that nobody read or ignored, dotted."""
        ignored = set(ignored)
        left = []
        for key, value in self._data.items():
            dotted = self._prefix + key
            if key in self._read or key in GENERIC_KEYS or GENERIC_PATTERN.match(key):
                continue
            if key in ignored or dotted in ignored:
                continue
            if key in GENERIC_WHEN_FALSY and not value:
                continue
            left.append(dotted)
        for sub in self._subs.values():
            left.extend(sub.unread(ignored))
        return left

    def read_keys(self) -> list[str]:
        """The keys read so far (sub-configs' dotted), in the order of the config."""
        out = [self._prefix + k for k in self._data if k in self._read and k not in self._subs]
        for sub in self._subs.values():
            out.extend(sub.read_keys())
        return out

    def defaulted(self) -> dict[str, Any]:
        """Keys read that the config lacks (or holds as null), with the default the family assumed; dotted."""
        out = {self._prefix + key: value for key, value in sorted(self._defaulted.items())}
        for sub in [*self._subs.values(), *self._views]:
            out.update(sub.defaulted())
        return out

    def assumed(self) -> dict[str, str]:
        """Keys read that the config does not set, taken from its config class's defaults (as transformers
        does), dotted: `vocab_size: 262208 (Gemma3TextConfig's default; the config does not set it)`."""
        out = {self._prefix + key: f"{json.dumps(self._defaulted[key])} ({cls}'s default; the config does not set it)"
               for key, cls in sorted(self._from_class.items())}
        for sub in [*self._subs.values(), *self._views]:
            out.update(sub.assumed())
        return out

    def check_understood(self, ignored: Iterable[str] | Mapping[str, str] = ()) -> None:
        """Every key present was read by the family, or is listed in `ignored` (keys the family
        knows do not change the cost; dotted for a sub-config's key), or is a generic one."""
        self.checked = True
        ignored = dict(ignored) if isinstance(ignored, Mapping) else dict.fromkeys(ignored, "")
        self.ignored = ignored
        left = self.unread(ignored)
        if left:
            family = self.model_type or "this"
            raise ImportProblem(f"{self.path}: {'key' if len(left) == 1 else 'keys'} {', '.join(left)} not understood "
                                f"by the {family} importer (they may change the cost; remove them if they do not, "
                                "or report it)")


def _shown(value: Any) -> str:
    """A config value in a message: repr, cut to 60 characters (a 10**30 or a long list stays readable)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:45] + " ... " + text[-10:]
