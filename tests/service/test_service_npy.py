"""The npy response's wire form (docs/service.md): the narrowest integer dtype that holds the values
(int32, else int64), float32 for fractional time, int64 on ``Accept: application/x-npy; dtype=int64``.

Expected bytes come from numpy's own ``np.save`` of the JSON response's numbers, in the dtype the rule
above names, decided here from ``np.iinfo(np.int32)``; never from the service's npy writer.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from fastapi.testclient import TestClient

from mrope.service import Settings
from mrope.service._render import npy_bytes
from mrope.service.app import create_app

NPY = "application/x-npy"
TYPICAL = {
    "model": "qwen2-vl",
    "segments": [
        {"type": "text", "tokens": 5},
        {"type": "image", "grid": [1, 28, 42]},
        {"type": "text", "tokens": 3},
        {"type": "video", "grid": [4, 28, 28], "fps": 2.0},
    ],
}
OMNI = {
    "model": "qwen3-omni",
    "segments": [
        {"type": "text", "tokens": 3},
        {"type": "video", "grid": [4, 28, 56], "second_per_grid": 0.6},
        {"type": "text", "tokens": 2},
    ],
}


def np_save(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def narrowest(values: list) -> np.dtype:
    """The dtype the contract names for integer positions, from numpy's int32 bounds."""
    arr = np.asarray(values, dtype=np.int64)
    info = np.iinfo(np.int32)
    fits = arr.size == 0 or (info.min <= arr.min() and arr.max() <= info.max)
    return np.dtype(np.int32 if fits else np.int64)


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(Settings())) as c:
        yield c


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32])
@pytest.mark.parametrize("shape", [(3, 0), (3, 7), (3, 2, 5)])
def test_npy_bytes_are_np_save(dtype, shape):
    arr = (np.arange(int(np.prod(shape))).reshape(shape) * 7 - 11).astype(dtype)
    if dtype is np.float32:
        arr = arr / np.float32(3)
    assert npy_bytes(arr) == np_save(arr)
    # negative control: the same numbers in another dtype are other bytes
    other = np.float64 if dtype is np.float32 else (np.int64 if dtype is np.int32 else np.int32)
    if arr.size:
        assert npy_bytes(arr) != np_save(arr.astype(other))


def test_positions_npy_is_int32_and_int64_on_request(client):
    want = client.post("/v1/positions", json=TYPICAL).json()["positions"]
    assert narrowest(want) == np.int32
    narrow = client.post("/v1/positions", json=TYPICAL, headers={"accept": NPY})
    assert narrow.status_code == 200 and narrow.headers["content-type"] == NPY
    assert narrow.content == np_save(np.asarray(want, dtype=np.int32))
    assert int(narrow.headers["content-length"]) == len(narrow.content)
    assert narrow.content != np_save(np.asarray(want, dtype=np.int64))  # negative control
    wide = client.post("/v1/positions", json=TYPICAL, headers={"accept": f'{NPY}; dtype="INT64"'})
    assert wide.status_code == 200 and wide.content == np_save(np.asarray(want, dtype=np.int64))
    # the headers are the same either way
    drop = {"content-length", "x-request-id"}
    assert {k: v for k, v in narrow.headers.items() if k not in drop} == {
        k: v for k, v in wide.headers.items() if k not in drop
    }


@pytest.mark.parametrize("pad", [2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**40])
def test_rope_index_npy_dtype_follows_the_values(client, pad):
    req = {
        "model": "qwen2-vl",
        "input_ids": [[1, 151652, 151655, 151655, 151655, 151655, 151653, 2], [0, 0, 1, 2, 3, 4, 5, 6]],
        "image_grid_thw": [[1, 4, 4]],
        "attention_mask": [[1] * 8, [0, 0] + [1] * 6],
        "pad_position": pad,
    }
    want = client.post("/v1/rope-index", json=req).json()["position_ids"]
    dtype = narrowest(want)
    assert dtype == (np.int32 if -(2**31) <= pad < 2**31 else np.int64)
    got = client.post("/v1/rope-index", json=req, headers={"accept": NPY})
    assert got.status_code == 200, got.text
    assert got.content == np_save(np.asarray(want, dtype=dtype))
    assert np.load(io.BytesIO(got.content)).tolist() == want
    wide = client.post("/v1/rope-index", json=req, headers={"accept": f"{NPY};dtype=int64"})
    assert wide.content == np_save(np.asarray(want, dtype=np.int64))


def test_fractional_time_stays_float32(client):
    want = client.post("/v1/positions", json=OMNI).json()["positions"]
    arr = np.asarray(want, dtype=np.float32)
    assert np.any(arr != np.trunc(arr))  # the case is fractional
    for accept in (NPY, f"{NPY}; dtype=int64"):
        got = client.post("/v1/positions", json=OMNI, headers={"accept": accept})
        assert got.status_code == 200 and got.content == np_save(arr)
        assert got.content != np_save(arr.astype(np.float64))  # negative control


@pytest.mark.parametrize(
    "accept,fmt",
    [
        (f"{NPY}; dtype=int64", "npy-int64"),
        (f"{NPY};q=0.5;dtype=int64, application/json", "json"),
        (f"application/json;q=0.5, {NPY};dtype=int64", "npy-int64"),
        (f"{NPY};", "npy"),
        ("application/json; charset=utf-8", "json"),
    ],
)
def test_negotiate_dtype(accept, fmt):
    from mrope.service._render import negotiate

    assert negotiate(accept) == fmt


@pytest.mark.parametrize(
    "accept",
    [f"{NPY}; dtype=int32", f"{NPY}; dtype=float64", f"{NPY}; charset=x", f"application/json, {NPY};dtype="],
)
def test_unknown_npy_parameter_is_a_406(client, accept):
    resp = client.post("/v1/positions", json=TYPICAL, headers={"accept": accept})
    assert resp.status_code == 406, resp.text
    message = resp.json()["error"]["message"]
    assert "dtype=int64" in message and accept.split(",")[-1].strip() in message
