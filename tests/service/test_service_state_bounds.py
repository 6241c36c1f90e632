"""Conversation states at their bounds on a real server process: a turn whose state after it would pass
2**53 is refused naming the bound, and GLM-Image generation ends a conversation on every path.

Expected values: 2**53 is the largest integer a JSON number (an IEEE-754 double) holds exactly, so a
state or position past it would not come back as sent; the GLM-Image rule (decode positions of images
to generate are planned, not a turn's) is the library's :func:`mrope.conversation_state`, asked here
directly for the fresh sequence.
"""

from __future__ import annotations

import httpx
import pytest
from support.service_proc import serve

import mrope
from mrope import Image, Text

pytestmark = pytest.mark.timeout(120)

LIMIT = 2**53


@pytest.fixture(scope="module")
def client():
    with serve() as srv, httpx.Client(base_url=srv.base, timeout=30) as c:
        yield c


def _post(client, **body) -> httpx.Response:
    return client.post("/v1/positions", json=body)


def _state(client, model: str) -> dict:
    resp = _post(client, model=model, segments=[{"type": "text", "tokens": 4}], return_state=True)
    assert resp.status_code == 200, resp.text
    return resp.json()["state"]


def test_a_turn_whose_state_would_pass_2_53_is_refused(client):
    """next_start = 2**53 and one token: the turn's state would say next_start 2**53 + 1 (before: a
    200 whose state the same service refused next time); one below, it is answered, and the state it
    returns is taken back."""
    good = _state(client, "qwen2.5-vl")
    at = {**good, "num_tokens": LIMIT - 10, "next_start": LIMIT, "top": LIMIT - 1}
    one = [{"type": "text", "tokens": 1}]
    resp = _post(client, model="qwen2.5-vl", segments=one, state=at, return_state=True)
    assert resp.status_code == 422, resp.text
    message = resp.json()["error"]["message"]
    assert str(LIMIT) in message and "next_start" in message
    # the same with more tokens and a lower start: the state after it decides, not where it starts
    below = {**at, "next_start": LIMIT - 2, "top": LIMIT - 3}
    resp = _post(client, model="qwen2.5-vl", segments=[{"type": "text", "tokens": 3}], state=below)
    assert resp.status_code == 422, resp.text
    # the control: the turn that ends at the bound
    resp = _post(
        client, model="qwen2.5-vl", segments=[{"type": "text", "tokens": 2}], state=below, return_state=True
    )
    assert resp.status_code == 200, resp.text
    data = resp.json()
    assert data["positions"] == [[LIMIT - 2, LIMIT - 1]] * 3
    assert data["state"]["next_start"] == LIMIT
    again = _post(client, model="qwen2.5-vl", segments=[{"type": "text", "tokens": 0}], state=data["state"])
    assert again.status_code == 200, again.text


GENERATE = [{"type": "text", "tokens": 3}, {"type": "image", "grid": [1, 4, 4], "generate": True}]


def test_glm_image_generation_states_are_refused_on_every_path(client):
    """A sequence or a continued turn ending with an image to generate returns no state (before: the
    continued turn returned one, and the next turn was accepted); without return_state both answer."""
    with pytest.raises(mrope.LayoutError, match="images to generate"):  # the library's own rule
        mrope.conversation_state(
            mrope.build_positions([Text(3), Image((1, 4, 4), generate=True)], model="glm-image")
        )
    fresh = _post(client, model="glm-image", segments=GENERATE, return_state=True)
    assert fresh.status_code == 422, fresh.text
    assert "images to generate" in fresh.json()["error"]["message"]
    state = _state(client, "glm-image")
    continued = _post(client, model="glm-image", segments=GENERATE, state=state, return_state=True)
    assert continued.status_code == 422, continued.text
    assert continued.json()["error"]["message"] == fresh.json()["error"]["message"]
    # the controls: the same requests without return_state are answered
    assert _post(client, model="glm-image", segments=GENERATE).status_code == 200
    assert _post(client, model="glm-image", segments=GENERATE, state=state).status_code == 200
