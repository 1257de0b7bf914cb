"""Write tests/data/hf_configs/<zoo spec>.json: the Hugging Face config of each zoo spec that has one.

Each config is built with the transformers config class (transformers 5) from the zoo spec's own
values (the numbers below are the dims of specs/<name>.yaml; the keys the spec does not state stay
at the class defaults), then `to_dict()` as a config.json holds it. Run from the repository root
(needs transformers, no network): python tools/make_hf_configs.py
"""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "hf_configs"

# zoo spec -> (config class, keys); every value is the zoo spec's dim of that meaning
ZOO_CONFIGS: dict[str, tuple[str, dict]] = {
    # specs/vit_b.yaml: img 224, patch 16, C 768, heads 12, L 12, MLP 4*C
    "vit_b": ("ViTConfig", {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                            "intermediate_size": 3072, "image_size": 224, "patch_size": 16}),
    # specs/vit_l.yaml: C 1024, heads 16, L 24, MLP 4*C
    "vit_l": ("ViTConfig", {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                            "intermediate_size": 4096, "image_size": 224, "patch_size": 16}),
    # specs/vit_h.yaml: C 1280, heads 16, L 32, MLP 4*C, patch 14
    "vit_h": ("ViTConfig", {"hidden_size": 1280, "num_hidden_layers": 32, "num_attention_heads": 16,
                            "intermediate_size": 5120, "image_size": 224, "patch_size": 14}),
    # specs/clip_vit_l14.yaml: C 1024, heads 16, L 24, MLP 4*C, patch 14, img 224, E 768 (QuickGELU)
    "clip_vit_l14": ("CLIPVisionConfig", {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
                                          "num_attention_heads": 16, "patch_size": 14, "image_size": 224,
                                          "projection_dim": 768, "hidden_act": "quick_gelu"}),
    # specs/sam_vit_b.yaml: the SamVisionConfig defaults are SAM ViT-B (img 1024, patch 16, C 768, L 12,
    # heads 12, window 14, global blocks 2 5 8 11, neck 256)
    "sam_vit_b": ("SamVisionConfig", {}),
    # specs/bert_base.yaml: C 768, L 12, heads 12, V 30522, P 512, segments 2, MLP 4*C
    "bert_base": ("BertConfig", {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
                                 "num_attention_heads": 12, "intermediate_size": 3072,
                                 "max_position_embeddings": 512, "type_vocab_size": 2}),
    # specs/gpt2_small.yaml: C 768, L 12, heads 12, V 50257, P 1024; gelu_tanh priced as one op
    # (gelu_pytorch_tanh: the zoo's --against check builds the model so too)
    "gpt2_small": ("GPT2Config", {"vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12,
                                  "n_head": 12, "activation_function": "gelu_pytorch_tanh"}),
    # specs/llama_1b.yaml: meta-llama/Llama-3.2-1B's config.json (C 2048, L 16, heads 32, KV 8, head_dim 64,
    # F 8192, V 128256, tied LM head, llama3 RoPE scaling, 131072 positions; the spec runs S 2048 of them)
    "llama_1b": ("LlamaConfig", {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                                 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
                                 "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
                                 "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                                                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                     "original_max_position_embeddings": 8192},
                                 "tie_word_embeddings": True, "bos_token_id": 128000, "eos_token_id": 128001,
                                 "architectures": ["LlamaForCausalLM"]}),
    # specs/llama3_8b.yaml: meta-llama/Llama-3.1-8B's config.json (C 4096, L 32, heads 32, KV 8, F 14336,
    # V 128256, untied LM head, llama3 RoPE scaling, 131072 positions; the spec runs S 8192 of them)
    "llama3_8b": ("LlamaConfig", {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                                  "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                                  "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
                                  "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                      "original_max_position_embeddings": 8192},
                                  "tie_word_embeddings": False, "bos_token_id": 128000, "eos_token_id": 128001,
                                  "architectures": ["LlamaForCausalLM"]}),
    # specs/t5_small_encoder.yaml: the T5Config defaults are t5-small (d_model 512, d_kv 64, d_ff 2048, 6 layers,
    # 8 heads, vocab 32128, 32 buckets up to 128, relu)
    "t5_small_encoder": ("T5Config", {}),
    # specs/whisper_tiny_encoder.yaml: the WhisperConfig defaults are whisper-tiny (d_model 384, 4 encoder
    # layers, 6 heads, FFN 1536, 80 mel bins, 1500 positions)
    "whisper_tiny_encoder": ("WhisperConfig", {}),
    # specs/mistral_7b.yaml: the MistralConfig defaults are Mistral-7B-v0.1 (C 4096, L 32, heads 32, KV 8,
    # F 14336, V 32000, sliding window 4096); S 8192
    "mistral_7b": ("MistralConfig", {"max_position_embeddings": 8192}),
    # specs/mixtral_8x7b.yaml: the MixtralConfig defaults are Mixtral-8x7B-v0.1 (8 experts, top-2, no sliding
    # window); S 8192
    "mixtral_8x7b": ("MixtralConfig", {"max_position_embeddings": 8192}),
}


def main() -> None:
    import transformers

    OUT.mkdir(parents=True, exist_ok=True)
    for name, (cls_name, keys) in ZOO_CONFIGS.items():
        config = getattr(transformers, cls_name)(dtype="bfloat16", **keys)  # the zoo specs are bf16
        data = config.to_dict()
        (OUT / f"{name}.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        print(f"wrote {OUT / name}.json ({cls_name})")


if __name__ == "__main__":
    main()
