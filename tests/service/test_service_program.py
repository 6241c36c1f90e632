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
