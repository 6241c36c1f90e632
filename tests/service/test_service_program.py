"""``Accept: application/x-mrope-program``: a positions endpoint answers with a position program.

Expected values: the JSON response's own positions and fields (the program must expand to exactly those
numbers, and its headers equal the npy answer's), read back with ``mrope.PositionProgram.from_bytes``.
"""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from mrope import PositionProgram
from mrope.service import Settings
from mrope.service.app import create_app

PROGRAM = "application/x-mrope-program"
NPY = "application/x-npy"
REQUESTS = {
    "qwen2-vl": {
        "model": "qwen2-vl",
        "segments": [
            {"type": "text", "tokens": 5},
            {"type": "image", "grid": [1, 28, 42]},
            {"type": "text", "tokens": 3},
            {"type": "video", "grid": [4, 28, 28], "fps": 2.0},
        ],
    },
    "qwen3-omni": {
        "model": "qwen3-omni",
        "segments": [
            {"type": "text", "tokens": 3},
            {"type": "video", "grid": [4, 28, 56], "second_per_grid": 0.6},
            {"type": "text", "tokens": 2},
        ],
    },
}


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(Settings())) as c:
        yield c


@pytest.mark.parametrize("name", REQUESTS)
def test_program_expands_to_the_json_positions(client, name):
    body = REQUESTS[name]
    want = client.post("/v1/positions", json=body).json()
    got = client.post("/v1/positions", json=body, headers={"accept": PROGRAM})
    assert got.status_code == 200 and got.headers["content-type"] == PROGRAM
    assert int(got.headers["content-length"]) == len(got.content)
    program = PositionProgram.from_bytes(got.content)
    ids = program.expand()
    np.testing.assert_array_equal(ids, np.asarray(want["positions"], dtype=ids.dtype))
    assert program.delta == want["delta"] and program.num_tokens == want["num_tokens"]
    assert len(got.content) < len(client.post("/v1/positions", json=body, headers={"accept": NPY}).content)
    # the other fields travel in the npy form's headers
    npy = client.post("/v1/positions", json=body, headers={"accept": NPY})
    drop = {"content-length", "content-type", "x-request-id"}
    assert {k: v for k, v in got.headers.items() if k not in drop} == {
        k: v for k, v in npy.headers.items() if k not in drop
    }


def test_program_negotiation_and_refusals(client):
    from mrope.service._render import negotiate

    assert negotiate(f"{PROGRAM}") == "program"
    assert negotiate(f"application/json;q=0.5, {PROGRAM}") == "program"
    assert negotiate(f"{PROGRAM};q=0.4, application/json") == "json"
    bad = client.post("/v1/positions", json=REQUESTS["qwen2-vl"], headers={"accept": f"{PROGRAM}; v=2"})
    assert bad.status_code == 406 and bad.json()["error"]["code"] == "not_acceptable"
    rope = {
        "model": "qwen2-vl",
        "input_ids": [[1, 151652, 151655, 151655, 151655, 151655, 151653, 2]],
        "image_grid_thw": [[1, 4, 4]],
    }
    refused = client.post("/v1/rope-index", json=rope, headers={"accept": PROGRAM})
    assert (
        refused.status_code == 406
        and "no application/x-mrope-program form" in refused.json()["error"]["message"]
    )
    assert client.post("/v1/rope-index", json=rope).status_code == 200  # control: JSON is answered


BYTES_REQUESTS = [
    REQUESTS["qwen2-vl"],
    {  # fps 1.7 under absolute time: uneven frame steps, the compile path
        "model": "qwen2.5-vl",
        "segments": [
            {"type": "text", "tokens": 4},
            {"type": "video", "grid": [8, 28, 28], "fps": 1.7},
            {"type": "image", "grid": [1, 56, 28]},
        ],
    },
    {
        "model": "glm-4.1v",
        "segments": [{"type": "image", "grid": [1, 28, 28]}, {"type": "text", "tokens": 2}],
    },
    {
        "model": "hunyuan-ocr",
        "segments": [{"type": "text", "tokens": 2}, {"type": "image", "grid": [1, 32, 32]}],
    },
]


@pytest.mark.parametrize("body", BYTES_REQUESTS, ids=lambda b: b["model"])
def test_program_bytes_are_those_compiled_from_the_json_answer(client, body):
    """The service makes the program from the layout plan (no ids): its bytes are those of the program
    compiled here from the JSON answer's positions and spans; a program off by one run is not."""
    from mrope import Span, rules_digest
    from mrope._program_build import compile_program
    from mrope.models import resolve_rules

    want = client.post("/v1/positions", json=body).json()
    got = client.post("/v1/positions", json=body, headers={"accept": PROGRAM})
    spans = [
        Span(
            s["kind"],
            s["start"],
            s["stop"],
            s["index"],
            *(tuple(s[k]) if k in s else None for k in ("grid", "tile")),
        )
        for s in want["spans"]
    ]
    ids = np.asarray(want["positions"], dtype=np.int64)
    digest = rules_digest(resolve_rules(body["model"], None))
    assert got.content == compile_program(ids, spans, want["delta"], digest).to_bytes()
    assert (
        got.content
        != compile_program(ids + (np.arange(ids.shape[1]) == 0), spans, want["delta"], digest).to_bytes()
    )
