"""A tiny but real transformer that "reasons" a fixed script, made on the spot.

No model can be downloaded where the tests run, so they make one. The model is
a llama-architecture network (2 layers, hidden size 128, 4 heads) whose
weights are chosen so that greedy *and* sampled decoding follow a script:

    <think>\\n  (the chat template's assistant turn ends with these)
    reasoning[0] … reasoning[-1]  </think>  "\\n\\n"  answer[0] … answer[-1]  <|im_end|>

How: every token of the script has its own embedding direction (one-hot in
the 128-dim residual stream), and every token outside the script shares one
more direction. Each layer's attention output projection and FFN down
projection are zero, so the residual stream passes through the two layers
unchanged (attention and FFN are computed, and add nothing). The final RMS
norm keeps the direction, and the output matrix maps the direction of each
script token to a large logit (about 226) on the token that follows it in the
script; the shared direction maps to the first reasoning token. So whatever
the prompt, the last prompt token starts the reasoning, and from there each
token names its successor: no sampler setting can leave the script (every
other logit is 0, a margin of e^-226 at temperature 1).

With `close_think=False` the last reasoning token leads back to the first:
the model reasons in a loop and never writes `</think>`, so every request
ends at its token budget (`finish_reason: "length"`) without an answer.

Consequences the tests rely on: the number of generated tokens is exact,
len(reasoning) + 2 + len(answer) + 1 (llama.cpp counts the EOS in
`completion_tokens`), and tokens must be distinct within the script (a token
names its successor), at most 127 of them.

`build_scripted_model` returns the vocabulary and the weights (numpy, in the
PyTorch/Hugging Face layout: Linear weights are [out, in]); `write_scripted_gguf`
writes them as a GGUF file for llama.cpp, and `hf_export.write_scripted_hf`
as a Hugging Face folder for vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HIDDEN = 128
LAYERS = 2
HEADS = 4
FFN = 256
CONTEXT = 2048
RMS_EPS = 1e-5
LOGIT = 20.0  # output weight: logit = LOGIT * sqrt(HIDDEN) ≈ 226 on the scripted successor

# Token types as GGUF (and SentencePiece) number them.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6

UNK, BOS, IM_END, IM_START, THINK, END_THINK = "<unk>", "<s>", "<|im_end|>", "<|im_start|>", "<think>", "</think>"
BLANK_LINE = "\n\n"  # one token: the blank line between </think> and the answer

#: Qwen3/DeepSeek-R1 style: the assistant turn opens a think block, and an
#: assistant message's `reasoning_content` is rendered inside one (servers
#: such as llama.cpp find the reasoning markers by rendering the template).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if message.get('reasoning_content') -%}"
    "{{- '<think>\\n' + message['reasoning_content'] + '\\n</think>\\n\\n' -}}"
    "{%- endif -%}"
    "{{- (message['content'] or '') + '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n<think>\\n' -}}"
    "{%- endif -%}"
)

#: What the tests make the model say. Leading spaces are part of the tokens.
REASONING = [" The", " user", " wants", " a", " scripted", " reply", ";", " I", " will", " give", " it", "."]
ANSWER = ["Here", " is", " the", " answer", ":", " forty", "-", "two", "!"]


@dataclass
class ScriptedModel:
    """Vocabulary, script and weights of a scripted model."""

    tokens: list[str]  # SentencePiece pieces: a leading space is written "▁"
    token_types: list[int]
    script: list[int]  # token ids generated after the prompt, EOS included when the think block closes
    close_think: bool
    weights: dict[str, np.ndarray] = field(default_factory=dict)  # Hugging Face Llama names

    @property
    def eos_id(self) -> int:
        return self.tokens.index(IM_END)

    def id_of(self, text: str) -> int:
        return self.tokens.index(piece(text))

    @property
    def reasoning_ids(self) -> list[int]:
        end = self.script.index(self.id_of(END_THINK)) if self.close_think else len(self.script)
        return self.script[:end]


def piece(text: str) -> str:
    """SentencePiece spelling of a token text: spaces become "▁"."""
    return text.replace(" ", "\u2581")


def build_scripted_model(reasoning: list[str], answer: list[str], close_think: bool, seed: int = 0) -> ScriptedModel:
    """The vocabulary and weights of a model that reasons `reasoning`, closes
    the think block, answers `answer` and stops (or, with `close_think=False`,
    repeats `reasoning` forever). Token texts are given as decoded (" word")."""
    if (not reasoning and not answer) or (close_think and not answer):
        raise ValueError("the script needs reasoning tokens, and answer tokens when the think block closes")
    specials = [(UNK, UNKNOWN), (BOS, CONTROL), (IM_END, CONTROL), (IM_START, CONTROL), (THINK, USER_DEFINED), (END_THINK, USER_DEFINED)]
    tokens = [t for t, _ in specials] + [f"<0x{b:02X}>" for b in range(256)]
    types = [k for _, k in specials] + [BYTE] * 256
    words = [piece(t) for t in reasoning + [BLANK_LINE] + answer]
    for w in words:
        if w not in tokens:
            tokens.append(w)
            types.append(NORMAL)

    def tid(text: str) -> int:
        return tokens.index(piece(text))

    script = [tid(t) for t in reasoning]
    if close_think and not reasoning:
        # No think block at all (a template that opens none): the answer, then the EOS.
        script += [tid(t) for t in answer] + [tid(IM_END)]
    elif close_think:
        script += [tid(END_THINK), tid(BLANK_LINE)] + [tid(t) for t in answer] + [tid(IM_END)]
    if len(set(script)) != len(script):
        raise ValueError("every token of the script must be distinct: a token names its successor")
    if len(script) + 1 > HIDDEN:
        raise ValueError(f"at most {HIDDEN - 1} script tokens")

    vocab = len(tokens)
    # Direction 0: every token outside the script; direction k+1: script[k].
    direction = {t: k + 1 for k, t in enumerate(script)}
    embed = np.zeros((vocab, HIDDEN), dtype=np.float32)
    for t in range(vocab):
        embed[t, direction.get(t, 0)] = 1.0
    successor = {0: script[0]}
    for k, t in enumerate(script):
        if t == tid(IM_END):
            continue  # generation stops at the EOS
        successor[k + 1] = script[k + 1] if k + 1 < len(script) else script[0]
    lm_head = np.zeros((vocab, HIDDEN), dtype=np.float32)
    for d, nxt in successor.items():
        lm_head[nxt, d] = LOGIT

    rng = np.random.default_rng(seed)

    def noise(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    weights: dict[str, np.ndarray] = {"model.embed_tokens.weight": embed, "lm_head.weight": lm_head, "model.norm.weight": np.ones(HIDDEN, np.float32)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        weights |= {
            p + "input_layernorm.weight": np.ones(HIDDEN, np.float32),
            p + "self_attn.q_proj.weight": noise(HIDDEN, HIDDEN),
            p + "self_attn.k_proj.weight": noise(HIDDEN, HIDDEN),
            p + "self_attn.v_proj.weight": noise(HIDDEN, HIDDEN),
            p + "self_attn.o_proj.weight": np.zeros((HIDDEN, HIDDEN), np.float32),  # attention adds nothing
            p + "post_attention_layernorm.weight": np.ones(HIDDEN, np.float32),
            p + "mlp.gate_proj.weight": noise(FFN, HIDDEN),
            p + "mlp.up_proj.weight": noise(FFN, HIDDEN),
            p + "mlp.down_proj.weight": np.zeros((HIDDEN, FFN), np.float32),  # the FFN adds nothing
        }
    return ScriptedModel(tokens=tokens, token_types=types, script=script, close_think=close_think, weights=weights)


#: Hugging Face Llama tensor names → GGUF names (`blk.N.` for `model.layers.N.`).
_GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "lm_head.weight": "output.weight",
    "model.norm.weight": "output_norm.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def _gguf_name(hf: str) -> str:
    if hf.startswith("model.layers."):
        layer, rest = hf[len("model.layers.") :].split(".", 1)
        return f"blk.{layer}.{_GGUF_NAMES[rest]}"
    return _GGUF_NAMES[hf]


#: A Hermes 2 Pro style template (Qwen2.5/Qwen3): tools are offered in the
#: system turn and the model calls one as `<tool_call>{json}</tool_call>`;
#: llama.cpp (with `--jinja`) recognises the format from the template and
#: streams the call as `tool_calls` deltas.
TOOL_TEMPLATE = (
    "{%- if tools -%}"
    "{{- '<|im_start|>system\nYou may call tools.\n<tools>\n' -}}"
    "{%- for tool in tools -%}{{- tool | tojson -}}{{- '\n' -}}{%- endfor -%}"
    "{{- '</tools>\nFor each call return <tool_call>\n{\"name\": <name>, \"arguments\": <args>}\n</tool_call><|im_end|>\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\n' + (message['content'] or '') -}}"
    "{%- for call in message.get('tool_calls') or [] -%}"
    "{{- '<tool_call>\n' + (call['function'] | tojson) + '\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>\n' -}}"
    "{%- elif message['role'] == 'tool' -%}"
    "{{- '<|im_start|>user\n<tool_response>\n' + message['content'] + '\n</tool_response><|im_end|>\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\n' -}}"
    "{%- endif -%}"
)
#: The answer of the tool-calling model: one call, its arguments over several tokens.
TOOL_CALL = ["<tool_call>", '\n{"name": "get_weather", ', '"arguments": ', '{"city": ', '"Paris"}}', "\n</tool_call>"]


def write_scripted_gguf(
    path: str | Path,
    reasoning: list[str] = REASONING,
    answer: list[str] = ANSWER,
    close_think: bool = True,
    context: int = CONTEXT,
    template: str = CHAT_TEMPLATE,
) -> ScriptedModel:
    """Writes the scripted model (see the module docstring) as a GGUF file for
    llama.cpp, with a SentencePiece-style vocabulary (the 256 byte tokens,
    the script's words, `<|im_start|>`, `<|im_end|>` as EOS, `<think>`,
    `</think>`) and a chat template whose assistant turn opens with
    `<think>\\n`. `context` is its training context, which caps llama.cpp's
    context per slot (the model's attention adds nothing, so any length
    works). Returns the model, whose `script` says what it will generate."""
    import gguf

    model = build_scripted_model(reasoning, answer, close_think)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("specreplay-scripted" + ("" if close_think else "-endless"))
    w.add_context_length(context)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(HEADS)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_vocab_size(len(model.tokens))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(model.tokens)
    w.add_token_scores([0.0] * len(model.tokens))
    w.add_token_types(model.token_types)
    w.add_unk_token_id(model.tokens.index(UNK))
    w.add_bos_token_id(model.tokens.index(BOS))
    w.add_eos_token_id(model.eos_id)
    w.add_add_bos_token(False)
    w.add_add_space_prefix(False)
    w.add_chat_template(template)
    for name, array in model.weights.items():
        w.add_tensor(_gguf_name(name), array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return model
