"""Out-of-range values in a request, against a real server process: format strings, multipart
boundaries, tile counts and rule values are refused with a 4xx that says what was expected, before
any work or allocation, and ``/healthz`` keeps answering.

One server like ``mrope serve`` (:func:`service_proc.serve`) with a small tokenizer (the timestamp text
of video layouts). Every socket has a timeout; every loop is
bounded.
"""

from __future__ import annotations

import io
import json
import threading
import time

import httpx
import pytest
from PIL import Image as PILImage
from support.service_proc import rss_mib, serve

pytestmark = pytest.mark.timeout(240)

BAD_FORMATS = ["{0.foo}", "{0[0]}", "{!r}", "{:{}}", "{}{}", "{x}", "no field", "{:q}"]


@pytest.fixture(scope="module")
def server(tokenizer_file):
    with serve(env={"MROPE_TOKENIZER": tokenizer_file}) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.base, timeout=30) as c:
        yield c


def png() -> bytes:
    buf = io.BytesIO()
    PILImage.new("RGB", (56, 56), (10, 20, 30)).save(buf, format="PNG")
    return buf.getvalue()


def error_of(resp: httpx.Response, status: int) -> dict:
    assert resp.status_code == status, resp.text[:2000]
    return resp.json()["error"]


def positions(client, segments, model="qwen2-vl", **extra) -> httpx.Response:
    return client.post("/v1/positions", json={"model": model, "segments": segments, **extra})


# ----------------------------------------------------------------- timestamp_format, multipart boundary


@pytest.mark.parametrize("fmt", BAD_FORMATS)
def test_timestamp_format_is_one_float_field_on_every_route(server, fmt):
    """Anything but one positional ``{}`` / ``{:spec}`` field is a 422 that says what was expected and
    what came, on all three routes that take rules (attribute and index lookups such as {0.foo} and
    {0[0]} included)."""
    rules = {"timestamp_format": fmt}
    answers = [
        httpx.post(
            server.base + "/v1/positions",
            json={"model": "qwen3-vl", "segments": [{"type": "text", "tokens": 2}], "rules": rules},
            timeout=30,
        ),
        httpx.post(
            server.base + "/v1/rope-index",
            json={"model": "qwen2-vl", "input_ids": [[1, 2]], "rules": rules},
            timeout=30,
        ),
        httpx.post(
            server.base + "/v1/positions/upload",
            data={"model": "qwen2-vl", "rules": json.dumps(rules)},
            files=[("files", ("a.png", png(), "image/png"))],
            timeout=30,
        ),
    ]
    for resp in answers:
        message = error_of(resp, 422)["message"]
        assert "timestamp_format" in message and "{:spec}" in message, message
        assert repr(fmt) in message or json.dumps(fmt) in message, message


@pytest.mark.parametrize("fmt", ["<{:.1f} seconds>", "{:d}", "{:.1f} seconds", "{{}} {:>8.2f}"])
def test_timestamp_formats_of_one_field_still_work(server, fmt):
    resp = httpx.post(
        server.base + "/v1/positions",
        json={
            "model": "qwen2-vl",
            "segments": [{"type": "text", "tokens": 2}],
            "rules": {"timestamp_format": fmt},
        },
        timeout=30,
    )
    assert resp.status_code == 200, resp.text


@pytest.mark.parametrize("length", [70, 257, 5000])
def test_long_multipart_boundary_is_a_client_error(server, length):
    boundary = "b" * length
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nqwen2-vl\r\n--{boundary}--\r\n'
    ).encode()
    resp = httpx.post(
        server.base + "/v1/positions/upload",
        content=body,
        headers={"content-type": f"multipart/form-data; boundary={boundary}"},
        timeout=30,
    )
    assert 400 <= resp.status_code < 500, resp.text
    assert resp.json()["error"]["code"] in ("invalid_multipart", "invalid_form"), resp.text


# ------------------------------------------------------------------------------- tile_order, tile count


@pytest.mark.parametrize(
    "image",
    [
        {"type": "image", "grid": [1, 4, 4], "tiles": [10000, 5000], "tile_order": [0]},
        {"type": "image", "grid": [1, 4, 4], "tiles": [2147483647, 3]},
        {"type": "image", "grid": [1, 4, 4], "tiles": [2147483647, 3], "tile_order": [0, 1]},
        {"type": "image", "grid": [1, 4, 4], "tiles": [2, 2], "tile_order": list(range(100_000))},
    ],
)
def test_tiles_are_checked_before_anything_is_allocated(server, image):
    before = rss_mib(server.pid)
    start = time.monotonic()
    resp = httpx.post(
        server.base + "/v1/positions", json={"model": "qwen2-vl", "segments": [image]}, timeout=60
    )
    took = time.monotonic() - start
    assert error_of(resp, 422)["code"] in ("layout_error", "validation_error")
    assert took < 1.0, took
    assert rss_mib(server.pid) < before + 200
    assert httpx.get(server.base + "/healthz", timeout=5).status_code == 200


# ------------------------------------------------------------------------------------------ rule values


class Poller:
    """Asks /healthz every 50 ms in a thread; remembers the slowest answer (or a failure)."""

    def __init__(self, base: str) -> None:
        self.base, self.slowest, self.failed, self.stopped = base, 0.0, None, False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=10) as c:
            while not self.stopped:
                start = time.monotonic()
                try:
                    c.get("/healthz").raise_for_status()
                except httpx.HTTPError as exc:
                    self.failed = repr(exc)
                self.slowest = max(self.slowest, time.monotonic() - start)
                time.sleep(0.05)

    def stop(self) -> None:
        self.stopped = True
        self.thread.join(timeout=15)


def video(grid, **extra):
    return {"type": "video", "grid": grid, **extra}


RULE_ATTACKS = [
    ("qwen3-vl", [video([1, 2, 2])], {"temporal_patch_size": 67108864}, 422),
    ("qwen3-vl", [video([2, 2, 2])], {"temporal_patch_size": 65}, 422),
    ("qwen3-vl", [video([500_000, 2, 2])], {"temporal_patch_size": 64}, 413),
    ("qwen3-vl", [video([2, 4, 4])], {"merge_size": 1 << 30}, 422),
    ("qwen2-vl", [video([2, 4, 4])], {"temporal_merge_size": 1 << 40}, 422),
    ("qwen2-vl", [{"type": "image", "height": 56, "width": 56}], {"patch_size": 1 << 40}, 422),
    ("qwen2-vl", [{"type": "image", "height": 56, "width": 56}], {"image_max_pixels": 1 << 60}, 422),
    ("qwen2.5-omni", [{"type": "audio", "seconds": 3.0}], {"audio_sampling_rate": 1 << 40}, 422),
    ("qwen2.5-omni", [{"type": "audio", "seconds": 3.0}], {"seconds_per_chunk": 1e300}, 422),
    ("qwen2.5-omni", [{"type": "audio", "seconds": 3.0}], {"audio_hop_length": 1 << 40}, 422),
    ("qwen2-vl", [video([2, 4, 4], fps=2.0)], {"tokens_per_second": 1e9}, 422),
    ("qwen2-vl", [video([2, 4, 4])], {"max_frames": 1 << 40}, 422),
]


def test_rule_values_are_bounded_and_weighed_first(server, client):
    """Every rule a request may set has a range, and the frame times a layout would plan count with
    its tokens: each of these is refused within a second, /healthz answering throughout."""
    poller = Poller(server.base)
    try:
        for model, segments, rules, status in RULE_ATTACKS:
            start = time.monotonic()
            resp = positions(client, segments, model=model, rules=rules)
            took = time.monotonic() - start
            assert resp.status_code == status, (rules, resp.text[:500])
            assert took < 1.0, (rules, took)
            assert len(resp.content) < 4096
    finally:
        poller.stop()
    assert poller.failed is None, poller.failed
    assert poller.slowest < 1.0, poller.slowest
    # the negative control: the same rules inside their ranges are served
    resp = positions(client, [video([2, 4, 4])], model="qwen3-vl", rules={"temporal_patch_size": 64})
    assert resp.status_code == 200, resp.text


# ---------------------------------------------------------------------------------------- layer_sets

TWO_SETS = {"sets": {"a": {}, "b": {"spatial": "reset"}}, "pattern": ["a", "b"]}
LAYER_SETS_REFUSALS = [
    # (layer_sets, extra body fields, Accept, status, words the message must hold)
    (
        {**TWO_SETS, "pattern": ["a", "c"]},
        {},
        None,
        422,
        "pattern names sets ['c'] that are not in sets ['a', 'b']",
    ),
    (
        {"sets": {"a": {"spatail": "reset"}}, "pattern": ["a"]},
        {},
        None,
        422,
        "layer_sets sets a: unknown field 'spatail'",
    ),
    ({"sets": {"a": {"spatial": "spiral"}}, "pattern": ["a"]}, {}, None, 422, "Input should be 'offset'"),
    (
        {"sets": {"nope": {}}, "pattern": ["nope"]},
        {},
        None,
        422,
        "a set name is a non-empty string other than 'nope'",
    ),
    ({"sets": {"a": {}}}, {}, None, 422, "'sets' and 'pattern' together"),
    ("all", {}, None, 422, "layer_sets is true or an object {sets, pattern}; got str"),
    (True, {"return_state": True}, None, 422, "a conversation's state (state, return_state) holds one set"),
    (
        True,
        {},
        "application/x-mrope-program",
        406,
        "position sets (layer_sets) have no application/x-mrope-program",
    ),
]


@pytest.mark.parametrize(("layer_sets", "extra", "accept", "status", "words"), LAYER_SETS_REFUSALS)
def test_layer_sets_refusals_say_what_was_expected(client, layer_sets, extra, accept, status, words):
    """An unknown set name, an override that is not a LayoutRules field (or not one of its values), the
    reserved name, half an object, another type, a conversation state, a program: a 4xx that names
    what was expected; the same sets asked properly are served (the control)."""
    segments = [{"type": "text", "tokens": 2}, {"type": "image", "grid": [1, 4, 4]}]
    body = {"model": "qwen2-vl", "segments": segments, "layer_sets": layer_sets, **extra}
    resp = client.post("/v1/positions", json=body, headers={"accept": accept} if accept else {})
    assert error_of(resp, status)["message"].count(words) == 1, resp.text
    control = client.post(
        "/v1/positions", json={"model": "qwen2-vl", "segments": segments, "layer_sets": TWO_SETS}
    )
    assert control.status_code == 200 and list(control.json()["position_sets"]) == ["a", "b"]
