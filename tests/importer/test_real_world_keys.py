"""Real-world config keys, read the same way by every family: `quantization_config` as published (AWQ, GPTQ,
bitsandbytes, FP8, compressed-tensors) mapped to the weight precision or refused naming the key and why;
every rope_type (dynamic and longrope included: the check command runs on meta); a model folder or a hub
cache folder as the source, and what `--format json` says was read and assumed."""
from __future__ import annotations

import json

import pytest

from costspec.analysis.gpus import get_gpu
from costspec.analysis.roofline import estimate
from costspec.importer import import_hf
from costspec.importer.config import ImportProblem
from costspec.model import loads
from tests.common import ROOT, run_cli

LLAMA = json.loads((ROOT / "tests/data/hf_configs_flow/llama_3_1_8b.json").read_text())
SMALL = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
             vocab_size=100, max_position_embeddings=32, bos_token_id=1, eos_token_id=2)

# quantization_config objects as their model repositories publish them
AWQ = {"bits": 4, "group_size": 128, "modules_to_not_convert": None, "quant_method": "awq", "version": "gemm",
       "zero_point": True}  # hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4
GPTQ = {"bits": 4, "group_size": 128, "damp_percent": 0.1, "desc_act": True, "static_groups": False, "sym": True,
        "true_sequential": True, "model_name_or_path": None, "model_file_base_name": None,
        "quant_method": "gptq"}  # hugging-quants/Meta-Llama-3.1-8B-Instruct-GPTQ-INT4
BNB_NF4 = {"_load_in_4bit": True, "_load_in_8bit": False, "bnb_4bit_compute_dtype": "bfloat16",
           "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": False,
           "llm_int8_enable_fp32_cpu_offload": False, "llm_int8_has_fp16_weight": False, "llm_int8_skip_modules": None,
           "llm_int8_threshold": 6.0, "load_in_4bit": True, "load_in_8bit": False,
           "quant_method": "bitsandbytes"}  # unsloth/Meta-Llama-3.1-8B-bnb-4bit
FBGEMM_FP8 = {"activation_scale_ub": 1200.0, "modules_to_not_convert": ["lm_head"], "quant_method": "fbgemm_fp8"}
W8A8 = {"config_groups": {"group_0": {
    "input_activations": {"block_structure": None, "dynamic": True, "group_size": None, "num_bits": 8,
                          "observer": "memoryless", "observer_kwargs": {}, "strategy": "token", "symmetric": True,
                          "type": "int"},
    "output_activations": None, "targets": ["Linear"],
    "weights": {"block_structure": None, "dynamic": False, "group_size": None, "num_bits": 8, "observer": "minmax",
                "observer_kwargs": {}, "strategy": "channel", "symmetric": True, "type": "int"}}},
    "format": "int-quantized", "global_compression_ratio": 1.46, "ignore": ["lm_head"], "kv_cache_scheme": None,
    "quant_method": "compressed-tensors", "quantization_status": "compressed"}  # neuralmagic ...-quantized.w8a8
FINE_GRAINED_FP8 = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                    "weight_block_size": [128, 128]}  # deepseek-ai/DeepSeek-V3
MXFP4 = {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                    "lm_head"], "quant_method": "mxfp4"}  # openai/gpt-oss-20b


def forward(model):
    """The forward report with the bytes of each row (the roofline attaches them)."""
    values = model.bind()
    report = model.report("forward", values)
    estimate(model, report, values, get_gpu("h100-sxm"))
    return report


def write(tmp_path, **changes):
    data = {**LLAMA, **SMALL, **changes}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("quant, precision", [
    (AWQ, "precision: {weights: int4, group: 128, compute: fp16}"),
    (GPTQ, "precision: {weights: int4, group: 128, compute: fp16}"),
    (BNB_NF4, "precision: {weights: nf4, group: 64, compute: bf16}"),
    (FBGEMM_FP8, "precision: {weights: fp8, group: 2147483647, compute: fp8}"),
    (W8A8, "precision: {weights: int8, group: 2147483647, compute: int8}"),
])
def test_published_quantization_configs_are_weight_precisions(tmp_path, quant, precision):
    path = write(tmp_path, torch_dtype="float16", quantization_config=quant)
    imported = import_hf(path)
    assert precision in imported.text
    head = "  - lm_head: {vocab: V}  # tie_word_embeddings: false\n    precision: {weights: none"
    assert head + ("}" if "compute: fp16}" in precision else ", compute: fp16}") in imported.text  # its own dtype
    assert "--pass forward" in imported.text and "--pass train" not in imported.text  # inference weights
    quantised, dense = loads(imported.text), loads(import_hf(write(tmp_path, torch_dtype="float16")).text)
    q, d = forward(quantised), forward(dense)
    assert (q.tc, q.params) == (d.tc, d.params)  # the same GEMMs and parameters, the weights stored narrower
    rows_q, rows_d = ({r.name: r for r in rep.rows} for rep in (q, d))
    assert rows_q["lm_head"].bytes == rows_d["lm_head"].bytes  # the head keeps its weight


def test_awq_weight_bytes_are_the_int4_layout(tmp_path):
    """The attention of 2 layers 64 wide: its weights at 1/2 B plus (fp16 scale + 4-bit zero) per group of 32."""
    quant = dict(AWQ, group_size=32)
    model = loads(import_hf(write(tmp_path, torch_dtype="float16", quantization_config=quant)).text)
    dense = loads(import_hf(write(tmp_path, torch_dtype="float16")).text)
    attn = [r for r in forward(model).rows if r.name.endswith("attn")][0]
    dense_attn = [r for r in forward(dense).rows if r.name == attn.name][0]
    C, kv = 64, 32  # q, o: C x C; k, v: kv x C (2 key/value heads of 16)
    weights = 2 * C * C + 2 * kv * C
    stored = weights // 2 + (2 * C + 2 * kv) * (C // 32) * 5 // 2
    assert dense_attn.bytes - attn.bytes == 2 * (weights * 2 - stored)  # L = 2 layers


@pytest.mark.parametrize("quant, key, why", [
    (FINE_GRAINED_FP8, "quantization_config.weight_block_size", "one fp32 scale per [128, 128] block"),
    (MXFP4, "quantization_config.quant_method", "'mxfp4' is not a weight format costspec prices"),
    (dict(BNB_NF4, bnb_4bit_use_double_quant=True), "quantization_config.bnb_4bit_use_double_quant",
     "double quantisation not modelled"),
    ({"load_in_8bit": True, "quant_method": "bitsandbytes", "llm_int8_threshold": 6.0},
     "quantization_config.load_in_8bit", "outlier columns"),
    (dict(GPTQ, bits=8), "quantization_config.bits", "8-bit weights"),
    (dict(AWQ, zero_point=False), "quantization_config.zero_point", "4-bit zero point"),
    (dict(AWQ, modules_to_not_convert=["gate"]), "quantization_config.modules_to_not_convert", "'gate'"),
    (dict(W8A8, config_groups={"group_0": dict(W8A8["config_groups"]["group_0"], weights=dict(
        W8A8["config_groups"]["group_0"]["weights"], num_bits=4, strategy="group", group_size=128))}),
     "quantization_config.config_groups.group_0.weights", "no zero point"),
])
def test_quantization_methods_refused_name_the_key_and_why(tmp_path, quant, key, why):
    path = write(tmp_path, quantization_config=quant)
    with pytest.raises(ImportProblem, match=key.replace(".", r"\.")) as exc:
        import_hf(path)
    assert why in str(exc.value)
    result = run_cli("import", "hf", str(path))
    assert result.returncode == 2 and key in result.stderr and "bug" not in result.stderr


@pytest.mark.parametrize("model_type, rope", [
    ("llama", {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}),
    ("mistral", {"rope_type": "longrope", "factor": 2.0, "original_max_position_embeddings": 16, "rope_theta": 1e4,
                 "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}),
    ("qwen3", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8, "beta_fast": 32,
               "beta_slow": 1, "rope_theta": 1e6}),
    ("qwen2", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8, "rope_theta": 5e5}),
])
def test_every_rope_type_imports_with_the_same_flops(tmp_path, model_type, rope):
    data = {**SMALL, "model_type": model_type, "torch_dtype": "bfloat16", "head_dim": 16}
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(data))
    scaled = tmp_path / "scaled.json"
    scaled.write_text(json.dumps({**data, "rope_parameters": rope}))
    text = import_hf(scaled).text
    assert f"# RoPE {rope['rope_type']}: its frequencies are constants of the cos / sin tables" in text
    a, b = loads(text), loads(import_hf(plain).text)
    ra, rb = a.report("train", a.bind()), b.report("train", b.bind())
    assert (ra.tc, ra.cuda, ra.params) == (rb.tc, rb.cuda, rb.params)


@pytest.mark.parametrize("rope", [{"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0},
                                  {"rope_type": "longrope", "factor": 2.0, "original_max_position_embeddings": 16,
                                   "rope_theta": 1e4, "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}])
def test_the_printed_check_of_run_time_rope_passes_on_meta(tmp_path, rope):
    """transformers picks dynamic / longrope frequencies from max(position_ids) in a Python branch that meta
    tensors cannot take: the check runs the frequencies the model was built with (the same FLOPs) and says so."""
    pytest.importorskip("transformers")
    path = write(tmp_path, num_hidden_layers=1, rope_scaling=rope)
    spec = tmp_path / "spec.yaml"
    assert run_cli("import", "hf", str(path), "-o", str(spec)).returncode == 0
    command = [line for line in spec.read_text().splitlines() if line.startswith("#   costspec validate")][0]
    result = run_cli(*command.removeprefix("#   costspec ").split())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "result: PASS" in result.stdout and f"RoPE {rope['rope_type']}: its frequencies are updated" in result.stdout


def test_a_hub_folder_and_what_json_says_was_read_and_assumed(tmp_path):
    repo = tmp_path / "models--meta-llama--Llama-3.1-8B"
    snapshot = repo / "snapshots" / "0e9e39f2"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0e9e39f2")
    data = {k: v for k, v in {**LLAMA, **SMALL}.items() if k not in ("torch_dtype", "mlp_bias", "attention_bias")}
    (snapshot / "config.json").write_text(json.dumps(data))
    (snapshot / "generation_config.json").write_text(json.dumps({"do_sample": True, "temperature": 0.6}))
    (snapshot / "README.md").write_text("---\nlicense: llama3.1\n---\n# Llama 3.1\n")
    result = run_cli("import", "hf", str(repo), "--format", "json", "--backbone")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["config"] == str(snapshot / "config.json") and info["hf_class"] == "LlamaModel"
    assert "name: Llama-3.1-8B" in info["spec"]
    assert {"hidden_size", "num_key_value_heads", "rope_scaling", "vocab_size"} <= set(info["read"])
    # transformers' defaults, taken (LlamaConfig's head_dim: hidden_size // num_attention_heads)
    head_dim = data["hidden_size"] // data["num_attention_heads"]
    assert info["defaults"] == {"attention_bias": False, "mlp_bias": False, "head_dim": head_dim}
    assert info["dims"]["C"] == {"value": 64, "doc": "hidden size", "key": "hidden_size"}
    assumed = info["assumed"]  # B and S are choices for a run; no dtype in the config: one is assumed
    assert assumed["B"].startswith("1") and assumed["S"].startswith("32 (") and "dtype" in assumed
    assert set(info["folder"]) == {"generation_config.json", "README.md"}
    assert info["check"].startswith("costspec validate SPEC.yaml --against hf:LlamaModel ")
