"""The scripted model's arithmetic, without a server: its layers pass the
residual stream through, and the output matrix names each token's successor."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numpy")

from realservers.scripted_model import ANSWER, REASONING, RMS_EPS, build_scripted_model, piece  # noqa: E402


def next_token(model, token: int) -> int:  # type: ignore[no-untyped-def]
    w = model.weights
    x = w["model.embed_tokens.weight"][token]
    # Each layer adds attention and FFN outputs through zero projections.
    for i in range(2):
        assert not w[f"model.layers.{i}.self_attn.o_proj.weight"].any()
        assert not w[f"model.layers.{i}.mlp.down_proj.weight"].any()
    x = x / np.sqrt((x * x).mean() + RMS_EPS) * w["model.norm.weight"]
    logits = w["lm_head.weight"] @ x
    best = int(np.argmax(logits))
    assert logits[best] - np.partition(logits, -2)[-2] > 200  # no sampler leaves the script
    return best


def test_greedy_decoding_follows_the_script() -> None:
    model = build_scripted_model(REASONING, ANSWER, close_think=True)
    newline = model.tokens.index("<0x0A>")  # the chat template's last prompt token
    out, token = [], newline
    while token != model.eos_id and len(out) < 100:
        token = next_token(model, token)
        out.append(token)
    assert out == model.script
    text = "".join(model.tokens[t] for t in out[:-1]).replace("\u2581", " ")
    assert text == "".join(REASONING) + "</think>\n\n" + "".join(ANSWER)
    assert model.reasoning_ids == model.script[: len(REASONING)]


def test_the_endless_variant_loops_over_its_reasoning() -> None:
    model = build_scripted_model(REASONING, ANSWER, close_think=False)
    token, out = model.tokens.index("<0x0A>"), []
    for _ in range(3 * len(REASONING)):
        token = next_token(model, token)
        out.append(token)
    assert [model.tokens[t] for t in out] == [piece(t) for t in REASONING] * 3


def test_script_tokens_must_be_distinct() -> None:
    with pytest.raises(ValueError, match="distinct"):
        build_scripted_model([" a", " b", " a"], ["x"], close_think=True)
