"""The scripted model (scripted_model.py) as a Hugging Face folder, for vLLM.

Same vocabulary, same weights, same chat template as the GGUF file: a
`LlamaForCausalLM` in float32 safetensors and a fast tokenizer (`tokenizer.json`:
BPE without merges and with byte fallback, so any text tokenizes to single
characters or bytes, and the script's word tokens decode as written;
`<think>` and `</think>` are added, non-special tokens, which is what vLLM's
`deepseek_r1` reasoning parser looks up). Needs `tokenizers` and
`safetensors`, which come with vLLM.

    python -m realservers.hf_export OUT_DIR [--endless]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from realservers.scripted_model import (
    ANSWER,
    BOS,
    CHAT_TEMPLATE,
    CONTEXT,
    CONTROL,
    END_THINK,
    FFN,
    HEADS,
    HIDDEN,
    IM_END,
    LAYERS,
    REASONING,
    RMS_EPS,
    THINK,
    UNK,
    ScriptedModel,
    build_scripted_model,
)


def write_scripted_hf(out: str | Path, reasoning: list[str] = REASONING, answer: list[str] = ANSWER, close_think: bool = True) -> ScriptedModel:
    from safetensors.numpy import save_file
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers

    model = build_scripted_model(reasoning, answer, close_think)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ids = {t: i for i, t in enumerate(model.tokens)}
    eos, bos = ids[IM_END], ids[BOS]

    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": FFN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "head_dim": HIDDEN // HEADS,
        "hidden_act": "silu",
        "max_position_embeddings": CONTEXT,
        "rms_norm_eps": RMS_EPS,
        "rope_theta": 10000.0,
        "vocab_size": len(model.tokens),
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "float32",
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": bos, "eos_token_id": eos}, indent=2))
    save_file({k: v for k, v in model.weights.items()}, str(out / "model.safetensors"), metadata={"format": "pt"})

    tok = Tokenizer(models.BPE(vocab=ids, merges=[], unk_token=UNK, byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    specials = [t for t, k in zip(model.tokens, model.token_types) if k == CONTROL] + [UNK]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in (THINK, END_THINK)])
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": BOS,
                "eos_token": IM_END,
                "unk_token": UNK,
                "pad_token": UNK,
                "add_bos_token": False,
                "add_eos_token": False,
                "model_max_length": CONTEXT,
                "chat_template": CHAT_TEMPLATE,
            },
            indent=2,
        )
    )
    return model


if __name__ == "__main__":
    args = sys.argv[1:]
    endless = "--endless" in args
    paths = [a for a in args if not a.startswith("--")]
    if len(paths) != 1:
        sys.exit("usage: python -m realservers.hf_export OUT_DIR [--endless]")
    m = write_scripted_hf(paths[0], close_think=not endless)
    print(f"wrote {paths[0]}: {len(m.tokens)} tokens, script of {len(m.script)}")
