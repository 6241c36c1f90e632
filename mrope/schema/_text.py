"""Text of a request as token ids: the tokenizer a face is given, loaded once, and text tokenized with it.

Every face (the service's ``MROPE_TOKENIZER``, ``--tokenizer`` on the command line, the pipeline's
``tokenizer=``) loads a ``tokenizer.json`` through :func:`load_tokenizer` and counts text through
:func:`tokenize`, so text has the same token ids everywhere.
"""

from __future__ import annotations

import os
from typing import Any

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
