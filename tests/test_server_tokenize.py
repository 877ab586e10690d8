"""Reading llama.cpp's `/tokenize` pieces back into the streamed text
(`server_tokenize.chunk_counts`); the request itself is tested against
llama.cpp in test_llamacpp.py."""

from __future__ import annotations

import numpy as np

from specreplay.run.server_tokenize import chunk_counts, tokenize_url


def test_the_url_is_the_server_root() -> None:
    assert tokenize_url("http://127.0.0.1:8080/v1") == "http://127.0.0.1:8080/tokenize"


def test_sentencepiece_pieces_spell_the_text_with_its_spaces() -> None:
    # " The user wants" streamed as " The us" | "er wants": "▁user" ends in
    # the second chunk. The leading ▁ is the text's own space here.
    pieces = ["▁The".encode(), "▁user".encode(), "▁wants".encode()]
    assert list(chunk_counts(pieces, " The user wants", np.array([7, 8]))) == [1, 2]  # type: ignore[arg-type]
    # SentencePiece's dummy prefix: a space the text does not have.
    assert list(chunk_counts(pieces, "The user wants", np.array([3, 11]))) == [1, 2]  # type: ignore[arg-type]


def test_byte_pieces_count_in_the_chunk_that_completes_the_character() -> None:
    # "媽" as three byte tokens, then a space marker split over three more.
    pieces = [bytes([229]), bytes([170]), bytes([189]), bytes([226]), bytes([150]), bytes([129]), b"a"]
    counts = chunk_counts(pieces, "媽 a", np.array([1, 2]))
    assert counts is not None and list(counts) == [3, 4]


def test_pieces_that_do_not_spell_the_text_give_no_counts() -> None:
    assert chunk_counts([b"hello"], "goodbye", np.array([7])) is None
