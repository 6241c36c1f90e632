"""Text to token ids with whatever tokenizer the caller has: one helper for the builder, the pipeline and
the service, so every part counts text tokens the same way."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from mrope import _extras
from mrope._caches import cached
from mrope._errors import LayoutError


@cached("tokenizer.files", maxsize=8)
def _tokenizer_file(path: str) -> Any:
    _extras.require("a tokenizer given as a path", "pipeline", "tokenizers")
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(path)
    except Exception as exc:  # the Rust side raises a bare Exception
        raise LayoutError(f"cannot load tokenizer {path!r} as a tokenizer.json: {exc}") from None


def load_tokenizer(tokenizer: Any) -> Any:
    """A ``tokenizer.json`` path (``str`` or ``os.PathLike``) -> ``tokenizers.Tokenizer``, loaded once per
    process; anything else (a callable ``str -> list[int]``, a tokenizer object, ``None``) as it is.

    Raises:
        LayoutError: the path cannot be loaded as a ``tokenizer.json``.
        mrope._extras.MissingExtra: the ``tokenizers`` package is missing (the ``pipeline`` extra).
    """
    if isinstance(tokenizer, (str, os.PathLike)):
        return _tokenizer_file(os.fspath(tokenizer))
    return tokenizer


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text``, no special tokens added.

    Args:
        tokenizer: a ``tokenizers.Tokenizer``, a transformers tokenizer (anything with ``encode`` and
            ``convert_tokens_to_ids``), or a callable ``str -> list[int]`` (or returning a mapping with
            ``"input_ids"``).

    Raises:
        LayoutError: an object that is none of these, or a result that is not a list of int ids.
    """
    if type(tokenizer).__module__.startswith("tokenizers") and hasattr(tokenizer, "encode"):
        ids: Any = tokenizer.encode(text, add_special_tokens=False).ids
    elif hasattr(tokenizer, "encode") and hasattr(tokenizer, "convert_tokens_to_ids"):  # transformers
        ids = tokenizer.encode(text, add_special_tokens=False)
    elif callable(tokenizer):
        ids = tokenizer(text)
        if isinstance(ids, Mapping):
            ids = ids["input_ids"]
    else:
        raise LayoutError(
            "tokenizer must be a tokenizers.Tokenizer, a transformers tokenizer or a callable "
            f"str -> list[int]; got {type(tokenizer).__name__}"
        )
    try:
        return [int(i) for i in ids]
    except (TypeError, ValueError):
        raise LayoutError(
            f"the tokenizer returned {ids!r} for {text!r}; expected a list of int ids"
        ) from None


def encode_with_offsets(tokenizer: Any, text: str) -> tuple[list[int], list[tuple[int, int]] | None]:
    """Token ids of ``text`` (no special tokens added) and each token's character span in ``text``, or
    ``None`` for the spans where the tokenizer gives none (a callable, a slow transformers tokenizer)."""
    if type(tokenizer).__module__.startswith("tokenizers") and hasattr(tokenizer, "encode"):
        enc = tokenizer.encode(text, add_special_tokens=False)
        return [int(i) for i in enc.ids], [(int(a), int(b)) for a, b in enc.offsets]
    if hasattr(tokenizer, "encode") and hasattr(tokenizer, "convert_tokens_to_ids"):
        if getattr(tokenizer, "is_fast", False):
            enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            return [int(i) for i in enc["input_ids"]], [(int(a), int(b)) for a, b in enc["offset_mapping"]]
    return encode_text(tokenizer, text), None
