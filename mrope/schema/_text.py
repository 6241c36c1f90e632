"""Text of a request as token ids: the tokenizer a face is given, loaded once, and text tokenized with it.

Every face (the service's ``MROPE_TOKENIZER``, ``--tokenizer`` on the command line, the pipeline's
``tokenizer=``) loads a ``tokenizer.json`` through :func:`load_tokenizer` and counts text through
:func:`tokenize`, so text has the same token ids everywhere.
"""

from __future__ import annotations

from typing import Any

from mrope._errors import MRopeError
from mrope._tokenizer import encode_text
from mrope._tokenizer import load_tokenizer as core_load_tokenizer

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


def tokenize(tokenizer: Any, text: str, where: str) -> list[int]:
    """Token ids of ``text`` (no special tokens added) with a ``tokenizers.Tokenizer``, a transformers
    tokenizer or a callable ``str -> list[int]``.

    Raises:
        TokenizerRequired: no tokenizer.
        RequestError: the tokenizer failed; the message starts with ``where``.
    """
    if tokenizer is None:
        raise TokenizerRequired(where)
    try:
        return encode_text(tokenizer, text)
    except MRopeError as exc:
        raise RequestError(f"{where}: {exc}") from None


__all__ = ["TokenizerRequired", "load_tokenizer", "tokenize"]
