"""A fixed fuzz corpus against one real server: models x rules x extreme values, on
``/v1/positions`` and ``/v1/rope-index``, answered as JSON and as npy. No request may get a 5xx, and
every refusal is a bounded error body. Then the same server is shut down with a request in progress.

The corpus is drawn once from a seeded generator, so a failure names a request that fails again.
"""

from __future__ import annotations

import json
import random
import signal
import socket
import time

import httpx
import pytest
from support.service_proc import read_until_closed, serve
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from mrope._rule_checks import RULE_BOUNDS
from mrope.models import PRESET_NAMES

pytestmark = pytest.mark.timeout(240)

SEED = 20261201
REQUESTS = 360
NPY = "application/x-npy"

BIG = [0, 1, 2, 3, 7, 2**16, 2**31 - 1, 2**31, 2**53, 2**63 - 1, 2**63, -1, -(2**63), -(2**63) - 1]
FLOATS = [0.0, -0.0, 1e-300, 1e-3, 0.5, 2.0, 999.9, 1000.0, 1e9, 1e300, -1.0, -1e300]
ODD = [None, True, False, "x", "", "{}", [], {}, [1, 2], "1e400"]


def pick(rng: random.Random, sane: list, wild: list, p_wild: float = 0.2):
    """Mostly a sane value (so requests get past their first field), sometimes a wild one."""
    return rng.choice(wild) if rng.random() < p_wild else rng.choice(sane)


def extremes(name: str) -> list:
    lo, hi = RULE_BOUNDS[name]
    if isinstance(hi, int):
        return [lo - 1, lo, hi, hi + 1, hi * 2, *random.sample(BIG, 2)]
    return [lo, hi, hi * 1.01, *random.sample(FLOATS, 3)]


def rule_overrides(rng: random.Random) -> dict:
    names = sorted(RULE_BOUNDS) + ["pad_position", "vision_start_id", "image_pad_id", "timestamp_format"]
    out = {}
    for name in rng.sample(names, rng.choice([0, 0, 1, 1, 2, 3])):
        if name in RULE_BOUNDS:
            out[name] = pick(rng, [RULE_BOUNDS[name][0] or 1.0, 2], extremes(name) + ODD[:3], 0.6)
        elif name == "timestamp_format":
            out[name] = rng.choice(["<{:.1f} seconds>", "{:>64}", "{:>65}", "{0[0]}", "%s", "{}" * 3])
        else:
            out[name] = rng.choice(BIG + ODD[:2])
    return out


def grid(rng: random.Random) -> list:
    return [pick(rng, [1, 2], [3, 2**15, 2**31 - 1, 0, -2])] + [
        pick(rng, [4, 8, 16], [1, 2, 6, 2**15, 2**31 - 1, 0, -2], 0.1) for _ in range(2)
    ]


def segment(rng: random.Random) -> dict:
    kinds = [
        "text",
        "text_ids",
        "image",
        "image",
        "image_size",
        "video",
        "video",
        "video_times",
        "audio",
        "odd",
    ]
    kind = rng.choice(kinds)
    if kind == "text":
        return {"type": "text", "tokens": pick(rng, [0, 1, 5, 40], BIG)}
    if kind == "text_ids":
        return {"type": "text", "ids": [pick(rng, [1, 7, 1000], BIG) for _ in range(rng.randint(0, 4))]}
    if kind == "image":
        seg = {"type": "image", "grid": grid(rng)}
        if rng.random() < 0.3:
            seg["tiles"] = [rng.choice([1, 2, 3, 10000, 2**31 - 1]), rng.choice([1, 2, 5000])]
        return seg
    if kind == "image_size":
        return {
            "type": "image",
            "height": pick(rng, [28, 56, 480], BIG),
            "width": pick(rng, [28, 56, 640], BIG),
        }
    if kind == "video":
        seg = {"type": "video", "grid": grid(rng)}
        if rng.random() < 0.5:
            seg["fps"] = pick(rng, [1.0, 2.0, 24.0], FLOATS)
        if rng.random() < 0.3:
            seg["second_per_grid"] = pick(rng, [0.5, 1.0], FLOATS)
        return seg
    if kind == "video_times":
        t = rng.choice([1, 2, 3])
        times = sorted(pick(rng, [0.0, 0.5, 1.0, 2.0], FLOATS) for _ in range(2 * t))
        return {"type": "video", "grid": [t, 4, 4], "frame_times": times}
    if kind == "audio":
        return {"type": "audio", "seconds": pick(rng, [0.5, 3.0, 30.0], FLOATS)}
    return rng.choice([{"type": "image"}, {"type": "nope"}, {"type": "video", "grid": [1, 2]}, {}, [], "x"])


def corpus() -> list[tuple[str, dict, str]]:
    rng = random.Random(SEED)
    random.seed(SEED)  # extremes() samples from the module generator
    out = []
    for k in range(REQUESTS):
        model = PRESET_NAMES[k % len(PRESET_NAMES)]
        accept = NPY if k % 3 == 0 else "application/json"
        rules = rule_overrides(rng)
        if k % 5 == 4:
            ids = [
                [rng.choice([1, 2, 151652, 151655, 151656, 151653, 2**31]) for _ in range(rng.randint(1, 12))]
            ]
            body = {
                "model": model,
                "input_ids": ids,
                "image_grid_thw": [grid(rng)] if rng.random() < 0.5 else None,
            }
            path = "/v1/rope-index"
        else:
            body = {"model": model, "segments": [segment(rng) for _ in range(rng.randint(1, 4))]}
            path = "/v1/positions"
        if rules:
            body["rules"] = rules
        out.append((path, body, accept))
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    tokenizer = Tokenizer(WordLevel({"[UNK]": 0, "<": 1, ">": 2}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.save(str(root / "tokenizer.json"))
    env = {
        "MROPE_TOKENIZER": str(root / "tokenizer.json"),
        "MROPE_MAX_TOKENS": "200000",
        "MROPE_SHUTDOWN_GRACE_S": "0.5",
    }
    with serve(env=env) as srv:
        yield srv


def test_fuzz_corpus_gets_no_server_error(server):
    refused = answered = 0
    with httpx.Client(base_url=server.base, timeout=60) as client:
        for path, body, accept in corpus():
            resp = client.post(
                path, content=json.dumps(body), headers={"content-type": "application/json", "accept": accept}
            )
            assert resp.status_code < 500, (path, body, resp.text[:500])
            if resp.status_code >= 400:
                refused += 1
                assert len(resp.content) < 16384, (path, body)
                err = resp.json()["error"]
                assert err["code"] and err["message"], (path, body, err)
            else:
                answered += 1
                assert resp.headers["content-type"].startswith(accept), (path, body)
        assert client.get("/healthz").status_code == 200
    assert "Traceback" not in server.log(), server.log()[-3000:]
    # the corpus reaches both outcomes: it is not all refusals (nor all answers)
    assert refused > REQUESTS // 10 and answered > REQUESTS // 10, (refused, answered)


def test_requests_cancelled_at_shutdown_are_no_server_errors(server):
    """A request still waiting for its body when the grace period ends is answered 503
    ``shutting_down`` and logged as that: no 500, no traceback. It stops the
    module's server, so it runs last here."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(
            b"POST /v1/positions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n{"
        )
        time.sleep(0.3)
        server.proc.send_signal(signal.SIGTERM)
        got = read_until_closed(s, 10.0)
        server.proc.wait(timeout=20)
    log = server.log()
    assert got.startswith(b"HTTP/1.1 503"), got[:300]
    assert json.loads(got.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "shutting_down"
    assert "Traceback" not in log and '" 500 ' not in log, log[-3000:]
    assert '"POST /v1/positions" 503 ' in log and "error=shutting_down" in log, log[-3000:]
