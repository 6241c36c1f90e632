"""Test support for code that uses mrope: the invariance kit and tiny models to run it on.

- :mod:`mrope.testing._invariance` (re-exported here): assertions on the q.k scores a model sees after
  :func:`mrope.apply_mrope`: translation, crop, tile, frame order, prefill/decode and time invariance.
- :mod:`mrope.testing._tiny`: tiny random-weight transformers models of a family, built from configs (no
  hub), for tests, examples and benchmarks of code that puts mrope inside a model.
- :func:`compare_schemes` (``mrope compare`` on the command line): rotary schemes compared on the same
  prompts (invariances, id growth of a long video, per-axis score decay), in :mod:`mrope.testing._compare`;
  its result types in :mod:`mrope.testing._comparison`.
- :func:`validate` (``mrope check`` on the command line): the RoPE validation table on a user's model, a
  checkpoint folder or a tiny model of a family; rows in :mod:`mrope.testing._rows`, the report in
  :mod:`mrope.testing._report`.
"""

from mrope import _extras

_extras.require("mrope.testing", "torch", "torch")

from mrope.testing._compare import compare_schemes
from mrope.testing._comparison import DecayCurve, SchemeComparison, SchemeResult
from mrope.testing._invariance import (
    assert_crop_invariant,
    assert_frame_order_invariant,
    assert_prefill_decode_consistent,
    assert_tile_invariant,
    assert_time_aligned,
    assert_translation_invariant,
    rope_scores,
)
from mrope.testing._report import RowResult, ValidationReport
from mrope.testing._rows.subject import ValidationError
from mrope.testing._tiny import tiny_config, tiny_model
from mrope.testing._validate import ROW_NAMES, validate

__all__ = [
    "DecayCurve",
    "ROW_NAMES",
    "RowResult",
    "SchemeComparison",
    "SchemeResult",
    "ValidationError",
    "ValidationReport",
    "assert_crop_invariant",
    "assert_frame_order_invariant",
    "assert_prefill_decode_consistent",
    "assert_tile_invariant",
    "assert_time_aligned",
    "assert_translation_invariant",
    "compare_schemes",
    "rope_scores",
    "tiny_config",
    "tiny_model",
    "validate",
]
