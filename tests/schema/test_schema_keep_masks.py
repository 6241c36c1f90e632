"""Pruning masks in the one request schema: run-length and base64-bitset ``keep``, their bound, and the
service's answers (200 with the pruned prompt, 422 naming expected and given lengths).

Expected values: masks written out by hand (runs) and packed with numpy's own ``packbits`` (bits), the
library's pruned prompt built from those bool arrays directly.
"""

from __future__ import annotations

import base64
import tracemalloc

import numpy as np
import pytest
from fastapi.testclient import TestClient

import mrope
from mrope import Image, Text, Video
from mrope.schema import RequestError, parse_request, to_segments
from mrope.service import Settings
from mrope.service.app import create_app

IMAGE_MASK = np.array([1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 1, 1], dtype=bool)  # runs [3, 2, 4, 1, 2]
VIDEO_MASK = np.tile([True, False, False], 6)[:16]


def _request(image_keep: dict, video_keep: dict) -> dict:
    return {
        "model": "qwen2-vl",
        "segments": [
            {"type": "text", "tokens": 3},
            {"type": "image", "grid": [1, 4, 12], "keep": image_keep},
            {"type": "video", "grid": [4, 4, 4], "fps": 2.0, "keep": video_keep},
            {"type": "text", "tokens": 2},
        ],
    }


GOOD = _request(
    {"runs": [3, 2, 4, 1, 2]},
    {"bits": base64.b64encode(np.packbits(VIDEO_MASK).tobytes()).decode(), "length": 16},
)


def _segments(data: dict) -> list:
    request = parse_request(data)
    return to_segments(request.segments, mrope.models.resolve_rules(request.model))


def test_runs_and_bits_decode_to_the_masks() -> None:
    got = mrope.build_positions(_segments(GOOD), model="qwen2-vl")
    want = mrope.build_positions(
        [Text(3), Image((1, 4, 12), keep=IMAGE_MASK), Video((4, 4, 4), fps=2.0, keep=VIDEO_MASK), Text(2)],
        model="qwen2-vl",
    )
    np.testing.assert_array_equal(got.ids, want.ids)
    assert got.num_tokens == 3 + 2 + 9 + 2 + 6 + 2  # text, wrappers, kept image, wrappers, kept video, text
    runs_first_dropped = _request({"runs": [0, 12]}, {"runs": [16]})
    assert _segments(runs_first_dropped)[1].keep.tolist() == [False] * 12


@pytest.mark.parametrize(
    ("keep", "message"),
    [
        ({"runs": [2**31 - 1, 2**31 - 1]}, "keep covers 4294967294 tokens; the segment .* has at most 98"),
        ({"bits": "AAAA", "length": 6 * (1 << 22)}, "keep covers 25165824 tokens"),
        ({"bits": "AA==", "length": 12}, "keep bits hold 1 bytes; length 12 needs 2"),
        ({"bits": "not base64!", "length": 12}, "base64"),
        ({"runs": [3], "bits": "AA==", "length": 3}, "runs or bits, exactly one"),
        ({"runs": [3, 0, 2]}, "after the first must be >= 1"),
        ({"bits": "AA=="}, "bits go with its length"),
    ],
)
def test_a_mask_is_bounded_by_its_segment_before_it_is_decoded(keep: dict, message: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(RequestError, match=message):
            _segments(_request(keep, {"runs": [16]}))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 24  # nothing the size of the claimed mask was made


def test_the_service_answers_pruned_prompts_and_names_wrong_lengths() -> None:
    with TestClient(create_app(Settings())) as client:
        ok = client.post("/v1/positions", json=GOOD)
        assert ok.status_code == 200, ok.text
        want = mrope.build_positions(_segments(GOOD), model="qwen2-vl")
        assert ok.json()["positions"] == want.ids.tolist() and ok.json()["num_tokens"] == want.num_tokens
        short = client.post("/v1/positions", json=_request({"runs": [3, 2, 4]}, {"runs": [16]}))
        assert short.status_code == 422
        assert "expected 12, got 9" in short.text


def test_the_token_cap_counts_a_pruned_prompt_whole() -> None:
    """Building a pruned prompt is the unpruned prompt's work: the cap counts it unpruned (a mask that
    keeps one token of a 16-token image does not let a request past MROPE_MAX_TOKENS = 40), and a mask
    that covers more tokens than the cap is refused before it is expanded."""
    data = {
        "model": "qwen2-vl",
        "segments": [
            {"type": "text", "tokens": 30},
            {"type": "image", "grid": [1, 8, 8], "keep": {"runs": [1, 15]}},
        ],
    }
    pruned = mrope.build_positions(_segments(data), model="qwen2-vl")
    assert pruned.num_tokens == 30 + 2 + 1  # under the cap once pruned
    with TestClient(create_app(Settings(max_tokens=40))) as client:
        refused = client.post("/v1/positions", json=data)
        assert refused.status_code == 413, refused.text
        assert (
            "the token count is 46, over the limit of 40" in refused.text
        )  # 30 text + 16 image tokens, unpruned
        data["segments"][1] = {"type": "image", "grid": [1, 16, 16], "keep": {"runs": [1, 63]}}
        refused = client.post("/v1/positions", json=data)
        assert refused.status_code == 413, refused.text
        assert "the tokens the keep mask of segment 1 covers is 64, over the limit of 40" in refused.text
        data["segments"][0] = {"type": "text", "tokens": 3}
        data["segments"][1] = {"type": "image", "grid": [1, 8, 8], "keep": {"runs": [1, 15]}}
        assert client.post("/v1/positions", json=data).status_code == 200  # 3 + 18 unpruned: under it
