"""The pipeline's ``program`` column (``Preprocessor(program=True)``): each row's bytes of
``mrope.PositionProgram.to_bytes``, read back and expanded equal to the row's own ``positions`` column
(built by the same job), empty for a failed record, refused with packing."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from mrope import PositionProgram
from mrope._errors import RecordError
from mrope.pipeline import Preprocessor, process_batch, process_record

RECORDS = [
    {"id": "text", "segments": [{"type": "text", "tokens": 9}]},
    {
        "id": "image-video",
        "segments": [
            {"type": "text", "tokens": 5},
            {"type": "image", "grid": [1, 28, 42]},
            {"type": "text", "tokens": 3},
            {"type": "video", "grid": [6, 28, 28], "fps": 1.7},
        ],
    },
    {
        "id": "tiles",
        "segments": [{"type": "image", "grid": [1, 56, 56], "tiles": [2, 2]}, {"type": "text", "tokens": 2}],
    },
    {"id": "broken", "segments": [{"type": "image", "grid": [1, 3, 5]}]},
]


@pytest.mark.parametrize("model", ["qwen2.5-vl", "qwen3-vl", "hunyuan-ocr"])
def test_program_column_round_trips_to_the_positions_column(model: str) -> None:
    records = [r for r in RECORDS if model != "hunyuan-ocr" or r["id"] in ("text", "broken")]
    table = process_batch(records, model=model, program=True, tokenizer=lambda text: [7] * len(text))
    assert table.schema.field("program").type == pa.binary()
    rows = table.to_pylist()
    seen = []
    for row in rows:
        if row["error"]:
            assert row["program"] == b"" and row["id"] == "broken"
            continue
        program = PositionProgram.from_bytes(row["program"])
        positions = np.asarray(row["positions"], dtype=np.int64)
        np.testing.assert_array_equal(program.expand(), positions)
        assert program.delta == row["delta"] and program.num_tokens == row["num_tokens"]
        seen.append((program, positions))
    assert len(seen) == len(records) - 1
    for (program, _), (_, other) in zip(seen, seen[1:], strict=False):  # negative control: another row's
        assert program.expand().shape != other.shape or not np.array_equal(program.expand(), other)
    assert "program" not in process_record(RECORDS[0], model=model)  # only when asked for


def test_packed_rows_refuse_the_program_column() -> None:
    with pytest.raises(RecordError, match="packed rows"):
        Preprocessor(model="qwen2-vl", program=True, pack=64).packed(RECORDS[:1])
