"""Tokenize processor output that holds only special tokens (the placeholder text a processor writes)."""

from __future__ import annotations

from tokenizers import AddedToken, Tokenizer
from tokenizers.models import WordLevel


def encode_specials(text: str, specials: dict[str, int]) -> list[int]:
    """Ids of ``text``, which must consist of the given special tokens only (anything else fails)."""
    unk = 999_999_999
    tok = Tokenizer(WordLevel({**specials, "[UNK]": unk}, unk_token="[UNK]"))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    ids = tok.encode(text, add_special_tokens=False).ids
    assert unk not in ids, f"text outside the special tokens: {text!r}"
    return ids
