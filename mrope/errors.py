"""The project's error types, and its one warning type.

Every error mrope raises on bad input is a :class:`MRopeError`, which is also a ``ValueError`` so that
callers who already catch ``ValueError`` keep working. The message always says what was expected and
what came. :class:`MRopeWarning` is the one warning type for things legal but worth knowing.
"""

from __future__ import annotations


class MRopeError(ValueError):
    """Base class of every error raised by mrope on bad input."""

    code = "invalid_input"
    """A stable machine-readable name of this kind of error (the faces' ``error_code``)."""


class SpecError(MRopeError):
    """A :class:`~mrope.RopeSpec` (or a model config it was read from) is inconsistent."""

    code = "spec_error"
    """A stable machine-readable name of this kind of error (the faces' ``error_code``)."""


class LayoutError(MRopeError):
    """Segments, grids or layout rules that cannot be turned into positions."""

    code = "layout_error"
    """A stable machine-readable name of this kind of error (the faces' ``error_code``)."""


class TokenError(MRopeError):
    """Token ids, placeholder runs and grids that do not agree (the token-id interface)."""

    code = "token_error"
    """A stable machine-readable name of this kind of error (the faces' ``error_code``)."""


class MediaError(MRopeError):
    """An image or video that cannot be read, or whose size or metadata is out of bounds."""

    code = "invalid_media"
    """A stable machine-readable name of this kind of error (the faces' ``error_code``)."""


class ApplyError(MRopeError):
    """Tensors given to the apply op with shapes, dtypes or devices it cannot take."""

    code = "apply_error"
    """A stable machine-readable name of this kind of error (the faces' ``error_code``)."""


class PatchError(MRopeError):
    """A model that :func:`mrope.integrations.transformers.patch` cannot patch (or unpatch) as asked."""

    code = "patch_error"
    """A stable machine-readable name of this kind of error (the faces' ``error_code``)."""


class PackingError(MRopeError):
    """Samples that cannot be packed as asked, or a model that cannot take packed rows (:mod:`mrope.packing`)."""


class MRopeWarning(UserWarning):
    """Something legal but worth knowing, e.g. two video patches that share a time coordinate."""
