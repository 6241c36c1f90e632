"""Long text tokenized a piece at a time (:func:`mrope.schema._text.tokenize`) gives the ids of the whole text.

The reference is the tokenizer itself on the whole text (``tokenizers``, run here); the tokenizers cover a
byte-level BPE (GPT-2 / Qwen style), whitespace-split words, and a SentencePiece-style Metaspace BPE that
marks the start of every text it is given (so a cut would change the ids: the text is kept whole).
"""

from __future__ import annotations

import random

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from mrope.schema._text import CHUNK_CHARS, TooManyTextTokens, tokenize, tokenize_with_offsets

WORDS = ["hello", "world", "12", "x", "über", "Ünï", "  ", "\n", "\n\n", "!", "?!", "ab", "'s", "3.5"]


def long_text(n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(WORDS) + rng.choice([" ", "", "  ", "\t", " ", " "]) for _ in range(n))


def byte_level(text: str) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text[:100_000]], trainer)
    return tok


def words() -> Tokenizer:
    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1, "world": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def metaspace(text: str) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never")  # words split at each ▁
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>"])
    tok.train_from_iterator([text[:100_000]], trainer)
    return tok


TEXT = long_text(60_000)  # about 4 pieces


@pytest.mark.parametrize(
    "make", [byte_level, lambda t: words(), metaspace], ids=["byte-level", "words", "metaspace"]
)
def test_pieces_give_the_ids_and_offsets_of_the_whole(make):
    tok = make(TEXT)
    assert len(TEXT) > 3 * CHUNK_CHARS
    whole = tok.encode(TEXT, add_special_tokens=False)
    assert tokenize(tok, TEXT, "t") == whole.ids
    ids, offsets = tokenize_with_offsets(tok, TEXT, "t")
    assert ids == whole.ids
    assert offsets is not None and offsets.tolist() == [list(o) for o in whole.offsets]


def test_a_cut_changes_the_ids_of_a_metaspace_tokenizer():
    """The negative control: cutting where the other tokenizers may be cut changes this one's ids, so
    the equality above holds only because the text was kept whole."""
    tok = metaspace(TEXT)
    at = TEXT.index(" h", CHUNK_CHARS)
    split = (
        tok.encode(TEXT[:at], add_special_tokens=False).ids
        + tok.encode(TEXT[at:], add_special_tokens=False).ids
    )
    assert split != tok.encode(TEXT, add_special_tokens=False).ids


def test_the_count_stops_at_the_limit():
    tok = words()
    text = "w " * 200_000
    with pytest.raises(TooManyTextTokens) as info:
        tokenize(tok, text, "segment 3", limit=50_000)
    assert info.value.where == "segment 3" and info.value.limit == 50_000
    assert 50_000 < info.value.counted < 200_000  # stopped after a piece, not at the end
    assert len(tokenize(tok, text, "t", limit=200_000)) == 200_000
