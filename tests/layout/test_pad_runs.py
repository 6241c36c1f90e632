"""PadRuns (the token scan's runs of image and video tokens, found by byte searches) equals runs of
equal token type found token by token, on random batches, rows and slices of them."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from mrope._layout.token_inputs import PadRuns


def _runs_token_by_token(values: list[int], image: int, video: int) -> tuple[list, list, list]:
    """Starts, stops and kinds (0 text, 1 image, 2 video) of the runs of equal type, one token at a time."""
    kind = [1 if v == image else 2 if v == video else 0 for v in values]
    starts, stops, kinds = [], [], []
    at = 0
    for k, group in itertools.groupby(kind):
        n = len(list(group))
        starts.append(at)
        stops.append(at + n)
        kinds.append(k)
        at += n
    return starts, stops, kinds


@pytest.mark.parametrize("seed", range(40))
def test_pad_runs_equal_token_by_token(seed: int) -> None:
    rng = random.Random(seed)
    image, video = (7, 9) if seed % 2 else (1, 2)
    b, length = rng.randint(1, 4), rng.randint(1, 60)
    pool = [image, video, 0, 3, 5] if seed % 3 else [image, image, video, 4]
    values = np.array([[rng.choice(pool) for _ in range(length)] for _ in range(b)], dtype=np.int64)
    runs = PadRuns(values, image, video)
    for row in range(b):
        first = rng.randint(0, length)
        last = rng.randint(first, length)
        for lo, hi in ((0, length), (first, last)):
            want = _runs_token_by_token(values[row, lo:hi].tolist(), image, video)
            assert runs.row(row, lo, hi) == want, (row, lo, hi, values[row].tolist())


def test_pad_runs_control_kinds_matter() -> None:
    """A negative control: swapping the image and video values swaps the kinds the runs report."""
    values = np.array([[0, 7, 7, 9, 0]])
    assert PadRuns(values, 7, 9).row(0, 0, 5) == ([0, 1, 3, 4], [1, 3, 4, 5], [0, 1, 2, 0])
    assert PadRuns(values, 9, 7).row(0, 0, 5) == ([0, 1, 3, 4], [1, 3, 4, 5], [0, 2, 1, 0])
