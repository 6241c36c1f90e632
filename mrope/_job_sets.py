"""The position sets a pipeline job writes in each row: the sets it asks for, their column type, and one
record's sets.

A model whose layers read different positions (:class:`mrope.LayerSets`: Circle-RoPE's AGE alternates a
circle set and an M-RoPE set by layer) is trained on every set: each layer's rotary reads its own. A job
with ``layer_sets`` (the request field of the faces, :mod:`mrope.schema._sets`) therefore lays out every
set of each record with :func:`mrope._position_sets.position_set_rules` and writes them in one row. The
column types are fixed per job, so the sets are the job's (its model's own, or the job's ``{sets,
pattern}``), and a record that asks for other sets, or whose sets do not share one token count, is
refused naming why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from mrope._builder import build_positions, count_tokens
from mrope._errors import JobError, RecordError, TooManyTokens
from mrope._position_sets import position_set_rules
from mrope._positions import Positions
from mrope._rules import LayoutRules
from mrope._segments import Segment
from mrope.models import ModelFamily, resolve_rules
from mrope.schema import RequestError
from mrope.schema._parse import parse_layer_sets
from mrope.schema._sets import LayerSetsBody, sets_family


def asked_sets(value: Any, has_model: bool) -> LayerSetsBody | None:
    """A job's ``layer_sets`` option as the request field reads it (``True``: the model's own sets;
    ``{"sets", "pattern"}``: the job's own; ``None`` / ``False``: none), checked when the job is made.

    Raises:
        JobError: a value the request field refuses, or sets without a job-level model (the sets fix
            the columns of every row, so a record's own model cannot choose them).
    """
    if isinstance(value, LayerSetsBody):
        asked: LayerSetsBody | None = value
    else:
        try:
            asked = parse_layer_sets(value)
        except RequestError as exc:
            raise JobError(f"layer_sets: {exc}", "layer_sets", "invalid_layer_sets") from None
    if asked is not None and not has_model:
        raise JobError(
            "layer_sets needs the job's model (model= or model_dir=; on the command line --model or "
            "--model-dir): its position sets fix the columns of every row",
            "layer_sets",
            "model_required",
        )
    return asked


@dataclass(frozen=True)
class JobSets:
    """The position sets of a job.

    Attributes:
        asked: the job's ``layer_sets`` as the request field reads it.
        family: the job model's family with those sets (:attr:`ModelFamily.layer_sets`).
        dtype: the number type of the ``position_sets`` column: int64 when every set is integer,
            float32 when every set is fractional, float64 where the two meet (exact for both).
        fractional: whether the first set (the ``positions`` column) is fractional (float32).
    """

    asked: LayerSetsBody
    family: ModelFamily
    dtype: np.dtype
    fractional: bool

    @property
    def pattern(self) -> tuple[str, ...]:
        """The set each layer reads, repeated over the layers."""
        return self.family.layer_sets.pattern


def job_sets(
    asked: LayerSetsBody, model: Any, rules: LayoutRules | Mapping[str, Any] | None, convention: str
) -> JobSets:
    """The :class:`JobSets` of a job whose model is ``model`` and whose ``rules`` are a
    :class:`LayoutRules` or overrides of the model's (under ``convention``)."""
    family = cast("ModelFamily", sets_family(model, asked))  # a family: asked is a request for sets
    if not isinstance(rules, LayoutRules):
        rules = resolve_rules(model, dict(rules) if rules else None, convention)
    kinds = [r.fractional_time for r in position_set_rules(family, rules).values()]  # type: ignore[union-attr]
    dtype = np.float64 if len(set(kinds)) > 1 else np.float32 if kinds[0] else np.int64
    return JobSets(asked, family, np.dtype(dtype), kinds[0])


def record_sets(
    job: JobSets,
    record_asked: LayerSetsBody | None,
    segments: Sequence[Segment],
    rules: LayoutRules,
    tokenizer: Any,
    max_tokens: int | None,
) -> dict[str, Positions]:
    """Every position set of one record (its segments under its ``rules``), in the job's set order.

    Raises:
        RecordError: the record's own ``layer_sets`` differ from the job's, or its sets differ in token
            count or number of rows (one row holds them together), or one is fractional where the job's
            column is integer.
        TooManyTokens: the sets' tokens together exceed ``max_tokens`` (counted before any is built).
    """
    if record_asked is not None and record_asked != job.asked:
        raise RecordError(
            f"the record's layer_sets {record_asked.model_dump(exclude_none=True)} differ from the job's "
            f"{job.asked.model_dump(exclude_none=True)}: a job's rows hold the job's sets (its columns are "
            "fixed per job); run such records in a job of their own"
        )
    set_rules = position_set_rules(job.family, rules)
    if max_tokens is not None:
        n = sum(count_tokens(segments, rules=r, tokenizer=tokenizer) for r in set_rules.values())
        if n > max_tokens:
            raise TooManyTokens(
                f"the {len(set_rules)} position sets make {n:,} tokens together, over "
                f"max_tokens={max_tokens:,}; raise max_tokens (on the command line: --max-tokens)"
            )
    sets = {name: build_positions(segments, rules=r, tokenizer=tokenizer) for name, r in set_rules.items()}
    shapes = {name: p.ids.shape for name, p in sets.items()}
    if len(set(shapes.values())) != 1:
        raise RecordError(
            f"the record's position sets have ids of shapes {shapes}: one row holds sets of one token count "
            "and number of rows (a set override that changes them, e.g. merge_size, needs rows of its own)"
        )
    if not np.can_cast(np.result_type(*(p.ids.dtype for p in sets.values())), job.dtype, "safe"):
        raise RecordError(
            f"the record's position sets are fractional, but this job's position_sets column is "
            f"{job.dtype}: run such records in a job whose model= and rules give them"
        )
    return sets


__all__ = ["JobSets", "asked_sets", "job_sets", "record_sets"]
