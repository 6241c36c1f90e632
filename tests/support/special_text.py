"""Tokenizers for processor output: special tokens alone, or printable characters around them."""

from __future__ import annotations

import string
from typing import Any

from tokenizers import AddedToken, Tokenizer, pre_tokenizers
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast


def encode_specials(text: str, specials: dict[str, int]) -> list[int]:
    """Ids of ``text``, which must consist of the given special tokens only (anything else fails)."""
    unk = 999_999_999
    tok = Tokenizer(WordLevel({**specials, "[UNK]": unk}, unk_token="[UNK]"))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    ids = tok.encode(text, add_special_tokens=False).ids
    assert unk not in ids, f"text outside the special tokens: {text!r}"
    return ids


def char_tokenizer(specials: dict[str, int], pad_token: str, **kwargs: Any) -> PreTrainedTokenizerFast:
    """A transformers tokenizer of one token per printable character (ids from 1000), ``specials`` whole
    at their ids; ``kwargs`` go to :class:`PreTrainedTokenizerFast` (``extra_special_tokens``)."""
    vocab = {c: 1000 + i for i, c in enumerate(string.printable)}
    vocab["[UNK]"] = 999
    vocab.update(specials)
    tok = Tokenizer(WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.add_special_tokens(list(specials))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token=pad_token, **kwargs)
