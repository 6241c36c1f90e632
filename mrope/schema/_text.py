"""Text of a request as token ids: the tokenizer a face is given, loaded once, and text tokenized with it.

Every face (the service's ``MROPE_TOKENIZER``, ``--tokenizer`` on the command line, the pipeline's
``tokenizer=``) loads a ``tokenizer.json`` through :func:`load_tokenizer` and counts text through
:func:`tokenize`, so text has the same token ids everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np

from mrope._errors import MRopeError
from mrope._tokenizer import encode_text, encode_with_offsets
from mrope._tokenizer import load_tokenizer as core_load_tokenizer

from ._errors import RequestError

T = TypeVar("T")


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


def load_tokenizer(tokenizer: Any) -> Any:
    """A ``tokenizer.json`` path -> ``tokenizers.Tokenizer`` (loaded once per process,
    :func:`mrope._tokenizer.load_tokenizer`); anything else (a callable ``str -> list[int]``, a tokenizer
    object, ``None``) is returned as it is.

    Raises:
        RequestError: the path cannot be loaded.
    """
    try:
        return core_load_tokenizer(tokenizer)
    except MRopeError as exc:
        raise RequestError(str(exc)) from None


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


_CANDIDATE = re.compile(r"(?<=\S) (?=[^\W_])")
"""A single space after a non-space and before a letter or digit."""


def _cut(tokenizer: Any, text: str, start: int) -> int | None:
    """A place at or after ``start`` where ``text`` may be cut without changing its token ids: before a
    single space between a non-space and a letter or digit (a pre-tokenizer boundary of the regex
    pre-tokenizers of GPT-2, Qwen, Llama 3 and of whitespace splitting), checked on the text around it:
    ids of the window whole must equal the ids of its halves. ``None`` when there is no such place, or
    :data:`_CUT_TRIES` candidates fail the check (a tokenizer that, say, prepends a marker to every text
    it is given)."""
    at = start
    for _ in range(_CUT_TRIES):
        found = _CANDIDATE.search(text, at)
        if found is None:
            return None
        at = found.start()
        lo, hi = max(at - _WINDOW, 0), at + _WINDOW
        if encode_text(tokenizer, text[lo:hi]) == encode_text(tokenizer, text[lo:at]) + encode_text(
            tokenizer, text[at:hi]
        ):
            return at
        at += 1
    return None


def _pieces(
    tokenizer: Any, text: str, where: str, limit: int | None, encode: Callable[[Any, str], Any]
) -> Iterator[tuple[int, Any]]:
    """``(start, encode(tokenizer, piece))`` for each piece of ``text`` (see :func:`tokenize`); the
    first item of each result holds the piece's ids, counted against ``limit``."""
    counted = start = 0
    while start < len(text):
        stop = _cut(tokenizer, text, start + CHUNK_CHARS) if len(text) - start > CHUNK_CHARS else None
        out = encode(tokenizer, text[start:stop])
        counted += len(out[0])
        if limit is not None and counted > limit:
            raise TooManyTextTokens(where, counted, limit)
        yield start, out
        start = len(text) if stop is None else stop


def _ids_only(tokenizer: Any, text: str) -> tuple[np.ndarray]:
    return (np.asarray(encode_text(tokenizer, text), dtype=np.int64),)


def _guarded(where: str, work: Callable[[], T]) -> T:
    try:
        return work()
    except TooManyTextTokens:
        raise
    except MRopeError as exc:
        raise RequestError(f"{where}: {exc}") from None


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
    if len(text) <= CHUNK_CHARS:
        ids = _guarded(where, lambda: encode_text(tokenizer, text))
        if limit is not None and len(ids) > limit:
            raise TooManyTextTokens(where, len(ids), limit)
        return ids
    pieces = _guarded(where, lambda: [ids for _, (ids,) in _pieces(tokenizer, text, where, limit, _ids_only)])
    return np.concatenate(pieces).tolist()


def tokenize_with_offsets(
    tokenizer: Any, text: str, where: str, limit: int | None = None
) -> tuple[list[int], np.ndarray | None]:
    """Token ids of ``text`` and each token's character span ``[start, stop)`` in it (int64 ``[N, 2]``),
    or ``None`` for the spans where the tokenizer gives none (:func:`mrope._tokenizer.encode_with_offsets`);
    a long text in pieces, as :func:`tokenize` cuts it, and refused past ``limit`` tokens the same way
    (it raises what :func:`tokenize` raises)."""
    if tokenizer is None:
        raise TokenizerRequired(where)
    pieces = _guarded(where, lambda: list(_pieces(tokenizer, text, where, limit, encode_with_offsets)))
    ids = [i for _, (piece_ids, _) in pieces for i in piece_ids]
    if any(offsets is None for _, (_, offsets) in pieces):
        return ids, None
    spans = [np.asarray(offsets, dtype=np.int64).reshape(-1, 2) + start for start, (_, offsets) in pieces]
    return ids, np.concatenate(spans) if spans else np.zeros((0, 2), dtype=np.int64)


__all__ = ["TooManyTextTokens", "TokenizerRequired", "load_tokenizer", "tokenize", "tokenize_with_offsets"]
