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


class ProgramError(MRopeError):
    """A position program (:class:`mrope.PositionProgram`) that is malformed, of another version, or
    asked for tokens it does not hold."""

    code = "program_error"
    """A stable machine-readable name of this kind of error (the faces' ``error_code``)."""


class PackingError(MRopeError):
    """Samples that cannot be packed as asked, or a model that cannot take packed rows (:mod:`mrope.packing`)."""


class RecordError(MRopeError):
    """A pipeline record or batch that does not have the documented shape, or that the job's columns
    cannot hold (:mod:`mrope.pipeline`, ``mrope batch``)."""

    code = "invalid_request"
    """A stable machine-readable name of this kind of error (the faces' ``error_code``)."""


class ModelRequired(RecordError):
    """A record without a model in a job without one."""

    code = "model_required"
    """A stable machine-readable name of this kind of error (the faces' ``error_code``)."""


class TooManyTokens(RecordError):
    """A record that makes more tokens than the job's ``max_tokens``."""

    code = "too_many_tokens"
    """A stable machine-readable name of this kind of error (the faces' ``error_code``)."""


class SampleTooLong(RecordError):
    """A record with more tokens than a packed row holds (packing never cuts a sample)."""

    code = "sample_too_long"
    """A stable machine-readable name of this kind of error (the faces' ``error_code``)."""


class JobError(RecordError):
    """A failure of the whole job, not of one record: a missing option every such record would need (no
    tokenizer for text: a record cannot carry one). :meth:`mrope.pipeline.Preprocessor.batch` and
    ``mrope batch`` raise it at once instead of recording the same error in every row.

    Attributes:
        option: the option that fixes it (``"tokenizer"``, ``"chat_template"``).
        code: the failure's stable name (``"job_error"``, ``"tokenizer_required"``, ...).
    """

    def __init__(self, message: str, option: str, code: str = "job_error") -> None:
        super().__init__(message)
        self.option = option
        self.code = code


class GoldenError(MRopeError):
    """A golden conformance suite (``mrope golden``) or a runtime's results file (``mrope conform``) that is
    malformed, of another format version, or names cases the suite does not hold."""


class MRopeWarning(UserWarning):
    """Something legal but worth knowing, e.g. two video patches that share a time coordinate."""
