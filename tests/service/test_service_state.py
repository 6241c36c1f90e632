"""Continued conversations over HTTP: ``POST /v1/positions`` with ``state`` / ``generated`` /
``return_state`` (docs/service.md).

Expected values: ``mrope.build_positions`` of the whole conversation built at once, the generated
tokens in it as text (tests/core/test_continue_turns.py checks that tail against each family's own
transformers 5.24 ``get_rope_index``). The library segments are written here by hand, apart from the
JSON the service reads.
"""

from __future__ import annotations

import io
import json

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from support.service_proc import serve

import mrope
from mrope import Audio, Image, Text, Video
from mrope.schema._state import MAX_STATE_NUMBER
from mrope.service import Settings
from mrope.service.app import create_app

NPY = "application/x-npy"


def _conversation(model: str) -> tuple[list[list[dict]], list[list], list[int]]:
    """Three turns as JSON segments and as library segments, and the tokens generated after each."""
    omni = model == "qwen3-omni"
    video_json = {
        "type": "video",
        "grid": [4, 28, 56],
        **({"second_per_grid": 0.6} if omni else {"fps": 2.0}),
    }
    video = Video(grid=(4, 28, 56), **({"second_per_grid": 0.6} if omni else {"fps": 2.0}))
    if model == "hunyuan-ocr":  # (images only: the image index runs on through the conversation)
        video_json, video = {"type": "image", "grid": [1, 56, 28]}, Image(grid=(1, 56, 28))
    second_json = [{"type": "text", "tokens": 3}, video_json, {"type": "text", "tokens": 2}]
    second = [Text(3), video, Text(2)]
    if omni:
        second_json.insert(1, {"type": "audio", "mel_frames": 230})
        second.insert(1, Audio(mel_frames=230))
    turns_json = [
        [
            {"type": "text", "tokens": 5},
            {"type": "image", "grid": [1, 28, 84]},
            {"type": "text", "tokens": 4},
        ],
        second_json,
        [{"type": "image", "grid": [1, 28, 28]}, {"type": "text", "tokens": 6}],
    ]
    turns = [[Text(5), Image(grid=(1, 28, 84)), Text(4)], second, [Image(grid=(1, 28, 28)), Text(6)]]
    return turns_json, turns, [7, 3, 0]


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(Settings())) as c:
        yield c


def _post(client, body: dict, accept: str | None = None):
    return client.post("/v1/positions", json=body, headers={"accept": accept} if accept else {})


def _drive(post, model: str) -> tuple[list[np.ndarray], list[dict], list[int], list]:
    """The conversation through the service: every turn sent with the state the last response returned
    and the tokens generated since."""
    turns_json, turns, generated = _conversation(model)
    state, gen, got, states = None, 0, [], []
    for segments in turns_json:
        body = {"model": model, "segments": segments, "return_state": True}
        if state is not None:
            body |= {"state": state, "generated": gen}
        resp = post(body)
        assert resp.status_code == 200, resp.text
        data = resp.json()
        got.append(np.asarray(data["positions"]))
        state = data["state"]
        states.append(state)
        gen = generated[len(got) - 1]
    return got, states, generated, turns


@pytest.mark.parametrize("model", ["qwen2.5-vl", "qwen3-omni", "hunyuan-ocr"])
def test_three_turns_equal_the_whole_conversation(client, model):
    got, states, generated, turns = _drive(lambda b: _post(client, b), model)
    whole_segments, offsets = [], []
    for turn, gen in zip(turns, generated, strict=True):
        offsets.append(mrope.count_tokens(whole_segments, model=model) if whole_segments else 0)
        whole_segments += turn + ([Text(gen)] if gen else [])
    whole = mrope.build_positions(whole_segments, model=model)
    fractional = model == "qwen3-omni"
    for i, (ids, start) in enumerate(zip(got, offsets, strict=True)):
        expected = whole.ids[:, start : start + ids.shape[1]]
        assert ids.shape[1] == mrope.count_tokens(turns[i], model=model)
        assert ids.dtype.kind == ("f" if fractional else "i")
        # (JSON writes a float32 as its shortest repr: read it back as float32)
        np.testing.assert_array_equal(ids.astype(expected.dtype), expected)
    # the last state is the whole conversation's (without its last, not yet generated answer)
    last = mrope.ConversationState.from_dict({k: v for k, v in states[-1].items() if k != "rules_digest"})
    assert last.num_tokens == whole.num_tokens and last.delta == whole.delta
    # negative control: the last turn built alone (no state) is not the tail
    alone = np.asarray(
        _post(client, {"model": model, "segments": _conversation(model)[0][2]}).json()["positions"]
    )
    assert not np.array_equal(alone, got[2])


def test_npy_response_equals_json(client):
    turns_json, _, _ = _conversation("qwen3-omni")
    first = _post(client, {"model": "qwen3-omni", "segments": turns_json[0], "return_state": True}).json()
    body = {
        "model": "qwen3-omni",
        "segments": turns_json[1],
        "state": first["state"],
        "generated": 7,
        "return_state": True,
    }
    as_json = _post(client, body).json()
    resp = _post(client, body, NPY)
    assert resp.status_code == 200 and resp.headers["content-type"] == NPY
    arr = np.load(io.BytesIO(resp.content))
    assert arr.dtype == np.float32
    np.testing.assert_array_equal(arr, np.asarray(as_json["positions"], dtype=np.float32))
    assert float(resp.headers["x-mrope-delta"]) == as_json["delta"]
    assert json.loads(resp.headers["x-mrope-state"]) == as_json["state"]


def _state(client, model: str = "qwen2.5-vl", **body) -> dict:
    data = {"model": model, "segments": [{"type": "text", "tokens": 4}], "return_state": True, **body}
    resp = _post(client, data)
    assert resp.status_code == 200, resp.text
    return resp.json()["state"]


def _refused(client, state, *, status: int = 422, model: str = "qwen2.5-vl", **body) -> str:
    resp = _post(
        client, {"model": model, "segments": [{"type": "text", "tokens": 2}], "state": state, **body}
    )
    assert resp.status_code == status, resp.text
    return resp.json()["error"]["message"]


def test_forged_states_are_refused(client):
    good = _state(client)
    ok = _post(client, {"model": "qwen2.5-vl", "segments": [{"type": "text", "tokens": 2}], "state": good})
    assert ok.status_code == 200  # (the control: the state as it came back is taken)
    # the state of another model, convention or rules overrides
    assert "'qwen2.5-vl' rules" in _refused(client, good, model="qwen2-vl")
    assert "rules_digest" in _refused(client, good, convention="transformers5")
    assert "rules_digest" in _refused(client, good, rules={"tokens_per_second": 4})
    assert "rules_digest" in _refused(client, {**good, "rules_digest": "0" * 16})
    assert "omni engine" in _refused(client, {**good, "engine": "omni"})
    # numbers: negative, huge, of the wrong type or kind
    assert "num_tokens" in _refused(client, {**good, "num_tokens": -1})
    assert "next_start" in _refused(client, {**good, "next_start": -1})
    assert "top" in _refused(client, {**good, "top": -2})
    assert "images" in _refused(client, {**good, "images": 2**60})
    assert "next_start" in _refused(client, {**good, "next_start": 2**70})
    assert "next_start must be an int" in _refused(client, {**good, "next_start": 4.5})
    assert "num_tokens" in _refused(client, {**good, "num_tokens": "4"})
    assert "top" in _refused(client, {**good, "top": True})
    assert "state" in _refused(client, [good])
    # keys missing or unknown
    assert "rules_digest" in _refused(client, {k: v for k, v in good.items() if k != "rules_digest"})
    assert "next_start" in _refused(client, {k: v for k, v in good.items() if k != "next_start"})
    assert "unknown field 'extra'" in _refused(client, {**good, "extra": 1})
    # generated: bounded, and only with a state
    assert "generated" in _refused(client, good, generated=-1)
    assert "generated" in _refused(client, good, generated=2**60)
    assert "needs 'state'" in _refused(client, None, generated=3)
    # where a turn starts is bounded (test_a_state_far_into_a_conversation_is_answered below)
    assert "at most 9007199254740992" in _refused(client, good, generated=2**53)


def test_a_state_far_into_a_conversation_is_answered(client):
    """A turn is laid out from where the conversation stands, so a state far above MROPE_MAX_TOKENS
    (which caps the turn's own tokens) is answered as the library answers it; a turn that would start
    past the largest number a state holds exactly (2**53) is a 422 naming both numbers."""
    cap = Settings().max_tokens
    segments = [
        {"type": "text", "tokens": 3},
        {"type": "image", "grid": [1, 28, 28]},
        {"type": "text", "tokens": 2},
    ]
    library = [Text(3), Image(grid=(1, 28, 28)), Text(2)]
    good = _state(client)
    for start in (cap * 1000 + 7, MAX_STATE_NUMBER - 400):  # (num_tokens after the turn within 2**53)
        far = {**good, "num_tokens": start, "next_start": start, "top": start - 1}
        resp = _post(
            client,
            {"model": "qwen2.5-vl", "segments": segments, "state": far, "generated": 5, "return_state": True},
        )
        assert resp.status_code == 200, resp.text
        want = mrope.continue_positions(
            mrope.ConversationState.from_dict(far), library, generated=5, model="qwen2.5-vl"
        )
        data = resp.json()
        assert np.array_equal(np.asarray(data["positions"], dtype=np.int64), want.positions.ids)
        assert data["positions"][0][0] == start + 5  # (the text after the 5 generated tokens)
        assert data["state"] == want.state.to_dict() and data["delta"] == want.positions.delta
    # past the bound: next_start + generated one over 2**53
    edge = {**good, "num_tokens": 2**53 - 10, "next_start": 2**53 - 4, "top": 2**53 - 5}
    msg = _refused(client, edge, generated=5)
    assert "9007199254740988 + 5 = 9007199254740993" in msg and "at most 9007199254740992" in msg
    assert (
        _post(
            client,
            {
                "model": "qwen2.5-vl",
                "segments": [{"type": "text", "tokens": 1}],
                "state": edge,
                "generated": 3,
            },
        ).json()["positions"]
        == [[2**53 - 1]] * 3
    )  # (the control: the state after it, next_start 2**53, at the bound)


def test_fractional_state_takes_whole_numbers(client):
    """A JSON writer that drops a whole float's ".0" (JavaScript) still continues an omni state."""
    state = _state(client, "qwen3-omni")
    plain = {**state, "next_start": int(state["next_start"]), "top": int(state["top"])}
    a = _post(client, {"model": "qwen3-omni", "segments": [{"type": "text", "tokens": 2}], "state": state})
    b = _post(client, {"model": "qwen3-omni", "segments": [{"type": "text", "tokens": 2}], "state": plain})
    assert a.status_code == b.status_code == 200
    assert a.json()["positions"] == b.json()["positions"] == [[4.0, 5.0]] * 3


def test_conversation_through_a_real_server():
    """One real ``mrope serve`` process: the state survives the wire (orjson out, JSON in)."""
    with serve() as srv, httpx.Client(base_url=srv.base, timeout=30) as http:
        got, _, _, _ = _drive(lambda b: http.post("/v1/positions", json=b), "qwen2.5-vl")
    with TestClient(create_app(Settings())) as c:
        expected, _, _, _ = _drive(lambda b: _post(c, b), "qwen2.5-vl")
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_array_equal(a, b)
