"""The measured coverage of `costspec import hf`: for every model type of MODEL_TYPES (transformers 5 names),
a config built from the transformers config class's defaults (every layer count set to 2 where the class
has one), written as config.json, imported (`costspec import hf`), evaluated (`costspec eval --batch 1
--dtype bf16`: every matmul-class FLOP on the Tensor Cores) and compared with the class the spec's header
names, built from the same file on meta as `validate --against` builds it: its forward under
FlopCounterMode and its parameter count.

    python tools/hf_coverage.py                 # the markdown table and the count of exact types
    python tools/hf_coverage.py llama bert      # some types only
    python tools/hf_coverage.py --json out.json # the rows as JSON too

A type whose family is added later is measured as soon as it is registered: the list is iterated, whatever
imports. A type that is not imported (exit 2) shows the importer's reason.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL_TYPES = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3",
    "gemma3_text", "phi", "phi3", "starcoder2", "olmo", "olmo2", "olmoe", "granite", "cohere", "deepseek_v2",
    "deepseek_v3", "gpt_oss", "falcon", "gpt_neox", "gpt2", "gptj", "bloom", "opt", "mamba", "mamba2", "jamba",
    "smollm3", "ministral",
    "bert", "roberta", "xlm-roberta", "deberta-v2", "distilbert", "electra", "modernbert", "t5", "bart", "whisper",
    "vit", "deit", "dinov2", "clip", "siglip", "siglip2", "sam", "convnext", "convnextv2", "swin", "resnet",
    "efficientnet", "mobilenet_v2", "beit", "segformer", "yolos", "detr",
)
# a config's layer counts (set to 2); lists of per-stage depths: each stage at most 2
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers", "decoder_layers",
              "num_decoder_layers", "num_encoder_layers")
DEPTH_KEYS = ("depths",)
# forward arguments a class needs to run on meta where its defaults cannot (the measurement only: the model, the
# config and the counted work are the same). JambaModel builds a full-attention mask even when no layer is
# attention (JambaConfig's defaults cut to 2 layers are two Mamba layers): from its cache (use_cache) it asks for a
# sequence length a cache of Mamba layers cannot give (ValueError), without one it checks the positions for packed
# sequences with a .item() (not on meta). Its documented precomputed mask mapping (no mask: causal attention, as
# without padding) and no cache skip both, on any depth.
CALL_KWARGS = {
    "jamba": lambda: {"use_cache": False, "attention_mask": {"full_attention": None, "linear_attention": None}},
}


@dataclass
class Row:
    model_type: str
    imported: bool = False
    hf_class: str = ""
    costspec_flops: int | None = None
    transformers_flops: int | None = None
    costspec_params: int | None = None
    transformers_params: int | None = None
    note: str = ""

    @property
    def exact(self) -> bool:
        return (self.imported and self.costspec_flops is not None and self.costspec_flops == self.transformers_flops
                and self.costspec_params == self.transformers_params)


def two_layers(data: dict) -> dict:
    """`data` with every layer count 2 (per-stage depths at most 2), nested configs too."""
    out = {}
    staged = isinstance(data.get("depths"), list)  # Swin's num_layers counts its stages: the depths are the layers
    for key, value in data.items():
        if isinstance(value, dict):
            value = two_layers(value)
        elif staged and key == "num_layers":
            pass
        elif key in LAYER_KEYS and isinstance(value, int) and not isinstance(value, bool) and value > 2:
            value = 2
        elif key in DEPTH_KEYS and isinstance(value, list) and all(isinstance(v, int) for v in value):
            value = [min(v, 2) for v in value]
        out[key] = value
    if out != data:  # a backbone's stage names and outputs follow the depth: the class derives them again
        for key in ("out_features", "out_indices", "stage_names"):
            out.pop(key, None)
    for key in ("layer_types", "mlp_only_layers", "no_rope_layers"):  # per-layer lists of the full depth
        if isinstance(out.get(key), list) and len(out[key]) > 2:
            out[key] = out[key][:2]
    return out


def default_config(model_type: str, layers: bool = True) -> dict:
    """The class's defaults, at 2 layers (`layers`) or at their own depth."""
    import transformers

    data = transformers.AutoConfig.for_model(model_type).to_dict()
    return two_layers(data) if layers else data


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "costspec", *args], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)


def last_line(text: str, path: Path) -> str:
    """The error a command printed, without the config's temporary path or the list of supported types."""
    lines = [line for line in text.strip().splitlines() if line.startswith("costspec:")] or text.strip().splitlines()
    line = (lines[-1] if lines else "").removeprefix("costspec: error: ").replace(f"{path}: ", "")
    return line.split(" (supported: ")[0][:300]


def measure(model_type: str, folder: Path) -> Row:
    """The row of `model_type`: at 2 layers, or where the class (or the importer) refuses its defaults at 2 layers
    (per-layer lists such as SAM's global_attn_indexes), at the class's own depth, the note saying why."""
    row = measure_at(model_type, folder, layers=True)
    if row.imported or row.note.startswith("no config class") or "no importer for it" in row.note:
        return row
    full = measure_at(model_type, folder, layers=False)
    if full.imported:
        full.note = f"at the default depth (2 layers: {row.note})"[:300] + (f"; {full.note}" if full.note else "")
        return full
    return row


def measure_at(model_type: str, folder: Path, layers: bool) -> Row:
    row = Row(model_type)
    try:
        data = default_config(model_type, layers)
    except Exception as exc:  # noqa: BLE001 -- a type this transformers does not have: reported in the table
        row.note = f"no config class: {type(exc).__name__}: {exc}"[:300]
        return row
    path = folder / model_type / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=str))
    spec = path.with_name("spec.yaml")
    imported = cli("import", "hf", str(path), "-o", str(spec), "--format", "json")
    if imported.returncode != 0:
        row.note = last_line(imported.stderr, path)
        return row
    row.imported = True
    info = json.loads(imported.stdout)
    row.hf_class = info["hf_class"]
    evaluated = cli("eval", str(spec), "--batch", "1", "--dtype", "bf16", "--format", "json")
    if evaluated.returncode != 0:
        row.note = "eval: " + last_line(evaluated.stderr, spec)
        return row
    totals = json.loads(evaluated.stdout)["totals"]
    row.costspec_flops, row.costspec_params = totals["tc_flops"], totals["params"]
    try:
        row.transformers_flops, row.transformers_params = transformers_counts(spec, path, info)
    except Exception as exc:  # noqa: BLE001 -- the real model did not run on meta: the table says why
        row.note = f"transformers: {type(exc).__name__}: {' '.join(str(exc).split())}"[:300]
    return row


def transformers_counts(spec: Path, config: Path, info: dict) -> tuple[int, int]:
    """FlopCounterMode's forward FLOPs and the parameters of the class the header names, built from the config
    on meta with the `--config-set`s of the printed check command, run on the spec's inputs at batch 1."""
    import shlex

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from costspec.against.target import load_target
    from costspec.model import load

    words = shlex.split(info["check"])
    sets = dict(words[i + 1].split("=", 1) for i, w in enumerate(words) if w == "--config-set")
    field = words[words.index("--output-field") + 1] if "--output-field" in words else None
    model = load(str(spec))
    values = model.bind(1)
    target = load_target(f"hf:{info['hf_class']}", model, values, "meta", str(config), sets, output=field, force=True)
    extra = CALL_KWARGS[info["family"]]() if info["family"] in CALL_KWARGS else {}
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        target.module(*target.args, **target.kwargs, **extra)
    return int(counter.get_total_flops()), sum(p.numel() for p in target.module.parameters())


def table(rows: list[Row]) -> str:
    def n(value: int | None) -> str:
        return "-" if value is None else f"{value:,}"

    out = ["| model type | imported? | class | costspec FLOPs | transformers FLOPs | costspec params | "
           "transformers params | exact? | note |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        note = r.note.replace("|", "\\|")
        out.append(f"| `{r.model_type}` | {'yes' if r.imported else 'no'} | {r.hf_class or '-'} | "
                   f"{n(r.costspec_flops)} | {n(r.transformers_flops)} | {n(r.costspec_params)} | "
                   f"{n(r.transformers_params)} | {'**yes**' if r.exact else 'no'} | {note} |")
    exact = sum(r.exact for r in rows)
    out.append("")
    out.append(f"exact: {exact} of {len(rows)} model types ({sum(r.imported for r in rows)} imported)")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("types", nargs="*", help="model types (default: all of MODEL_TYPES)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    types = args.types or list(MODEL_TYPES)
    with tempfile.TemporaryDirectory() as folder:
        rows = []
        for model_type in types:
            rows.append(measure(model_type, Path(folder)))
            print(f"{model_type}: {'exact' if rows[-1].exact else rows[-1].note or 'differs'}", file=sys.stderr)
    print(table(rows))
    if args.json is not None:
        args.json.write_text(json.dumps([{**asdict(r), "exact": r.exact} for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
