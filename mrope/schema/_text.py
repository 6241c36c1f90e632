"""Text of a request as token ids: the tokenizer a face is given, loaded once, and text tokenized with it.

Every face (the service's ``MROPE_TOKENIZER``, ``--tokenizer`` on the command line, the pipeline's
``tokenizer=``) loads a ``tokenizer.json`` through :func:`load_tokenizer` and counts text through
:func:`tokenize`, so text has the same token ids everywhere.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from mrope._caches import cached
from mrope._errors import MRopeError
from mrope._tokenizer import encode_text

from ._errors import RequestError


class TokenizerRequired(RequestError):
    """Text given as a string where no tokenizer was given (a face may add how to give one).

    Attributes:
        where: the place of the text in the request (``"segment 2"``, ``"message 0 item 1"``).
    """

    code = "tokenizer_required"

    def __init__(self, where: str) -> None:
        super().__init__(
            f"{where}: text needs a tokenizer to count its tokens: give a tokenizer (a tokenizer.json), "
            "or a 'tokens' count"
        )
        self.where = where


@cached("schema.tokenizers", maxsize=8)
def _tokenizer_file(path: str) -> Any:
    try:
        from tokenizers import Tokenizer  # an optional dependency: only a path needs it
    except ImportError:
        raise RequestError(
            f"tokenizer {path!r} is a path, which needs the 'tokenizers' package (pip install tokenizers)"
        ) from None
    try:
        return Tokenizer.from_file(path)
    except Exception as exc:  # the Rust side raises a bare Exception
        raise RequestError(f"cannot load tokenizer {path!r} as a tokenizer.json: {exc}") from None


def load_tokenizer(tokenizer: Any) -> Any:
    """A ``tokenizer.json`` path -> ``tokenizers.Tokenizer`` (loaded once per process); anything else
    (a callable ``str -> list[int]``, a tokenizer object, ``None``) is returned as it is.

    Raises:
        RequestError: the path cannot be loaded (or the ``tokenizers`` package is missing).
    """
    if isinstance(tokenizer, (str, os.PathLike)):
        return _tokenizer_file(os.fspath(tokenizer))
    return tokenizer


class TooManyTextTokens(RequestError):
    """Text with more tokens than a caller's bound (counted chunk by chunk, so it stops early).

    Attributes:
        where: the place of the text in the request.
        counted: the tokens counted when the bound was passed (a lower bound of the text's count).
        limit: the bound.
    """

    code = "too_many_tokens"

    def __init__(self, where: str, counted: int, limit: int) -> None:
        super().__init__(f"{where}: the text has more than {limit:,} tokens ({counted:,} counted so far)")
        self.where = where
        self.counted = counted
        self.limit = limit


CHUNK_CHARS = 1 << 16
"""Longer texts are tokenized in pieces of about this many characters (see :func:`tokenize`)."""

_WINDOW = 256
"""Characters on each side of a cut that are tokenized whole and split to check the cut."""

_CUT_TRIES = 8
"""Candidate cuts tried per piece before the rest of the text is tokenized whole."""


def _cut(tokenizer: Any, text: str, start: int) -> int | None:
    """A place at or after ``start`` where ``text`` may be cut without changing its token ids: before a
    single space between a non-space and a letter or digit (a pre-tokenizer boundary of the regex
    pre-tokenizers of GPT-2, Qwen, Llama 3 and of whitespace splitting), checked on the text around it:
    ids of the window whole must equal the ids of its halves. ``None`` when no candidate passes (a
    tokenizer that, say, prepends a marker to every text it is given)."""
    at = start
    for _ in range(_CUT_TRIES):
        at = text.find(" ", at + 1)
        if at < 0 or at + 1 >= len(text):
            return None
        if text[at - 1].isspace() or not text[at + 1].isalnum():
            continue
        lo, hi = max(at - _WINDOW, 0), at + _WINDOW
        if encode_text(tokenizer, text[lo:hi]) == encode_text(tokenizer, text[lo:at]) + encode_text(
            tokenizer, text[at:hi]
        ):
            return at
    return None


def _chunked(tokenizer: Any, text: str, where: str, limit: int | None) -> list[int]:
    if len(text) <= CHUNK_CHARS:
        ids = encode_text(tokenizer, text)
        if limit is not None and len(ids) > limit:
            raise TooManyTextTokens(where, len(ids), limit)
        return ids
    pieces: list[np.ndarray] = []
    counted = start = 0
    while start < len(text):
        stop = _cut(tokenizer, text, start + CHUNK_CHARS) if len(text) - start > CHUNK_CHARS else None
        ids = encode_text(tokenizer, text[start:stop])
        counted += len(ids)
        if limit is not None and counted > limit:
            raise TooManyTextTokens(where, counted, limit)
        pieces.append(np.asarray(ids, dtype=np.int64))
        start = len(text) if stop is None else stop
    return np.concatenate(pieces).tolist() if pieces else []


def tokenize(tokenizer: Any, text: str, where: str, limit: int | None = None) -> list[int]:
    """Token ids of ``text`` (no special tokens added) with a ``tokenizers.Tokenizer``, a transformers
    tokenizer or a callable ``str -> list[int]``.

    A text over :data:`CHUNK_CHARS` characters is tokenized a piece at a time, cut where cutting keeps
    the ids (see :func:`_cut`), and the ids of each piece are kept as an int64 array: memory stays a
    few bytes per token, not the tokenizer's per-token objects of the whole text; ``limit``: refused as
    soon as more tokens than this are counted.

    Raises:
        TokenizerRequired: no tokenizer.
        TooManyTextTokens: more than ``limit`` tokens.
        RequestError: the tokenizer failed; the message starts with ``where``.
    """
    if tokenizer is None:
        raise TokenizerRequired(where)
    try:
        return _chunked(tokenizer, text, where, limit)
    except TooManyTextTokens:
        raise
    except MRopeError as exc:
        raise RequestError(f"{where}: {exc}") from None


__all__ = ["TooManyTextTokens", "TokenizerRequired", "load_tokenizer", "tokenize"]
