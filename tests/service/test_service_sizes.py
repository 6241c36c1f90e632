"""Sizes weighed before work, against a real server process (issue 34, items 1-5 and 13).

Each hostile request declares a size (a mask's runs, a text's length, a conversation's turns, a
video's ``nframes``, ``frame_times``, generation grids) that the old service paid for before it
refused it. Each test sends it to one server (:func:`service_proc.serve`, like ``mrope serve``) while a
second thread asks ``/healthz`` every 20 ms, and checks the status, the time taken, the growth of the
server's peak RSS (reset before each request through ``/proc/<pid>/clear_refs``) and the slowest
``/healthz`` answer. The bounds are the ones docs/service.md states beside ``MROPE_MAX_TOKENS``; times
are bounded generously (the machine is shared).
"""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
import jinja2
import pytest
from support import media as tm
from support.chat_templates import QWEN2_VL_TEMPLATE
from support.service_proc import serve
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

pytestmark = pytest.mark.timeout(300)

MAX_TOKENS = 100_000
"""The server's ``MROPE_MAX_TOKENS`` (a tenth of the default, so that the refusals stay quick here)."""

PEAK_RSS_MIB = 100
"""Most a refused request may raise the server's peak RSS (docs/service.md, beside MROPE_MAX_TOKENS)."""

HEALTH_S = 0.5
"""Slowest ``/healthz`` answer while a hostile request is served (the event loop stays free)."""

SECONDS = 20.0
"""A generous bound on one request's time (the old service took 4 to 40 s on these)."""

TEMPLATE = QWEN2_VL_TEMPLATE
"""The chat template the server finds next to its tokenizer."""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sizes-tokenizer")
    tokenizer = Tokenizer(WordLevel({"[UNK]": 0, "<": 1, ">": 2}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "chat_template.jinja").write_text(TEMPLATE, encoding="utf-8")
    env = {"MROPE_MAX_TOKENS": str(MAX_TOKENS), "MROPE_TOKENIZER": str(folder / "tokenizer.json")}
    with serve(env=env) as srv:
        srv.tokenizer = env["MROPE_TOKENIZER"]  # type: ignore[attr-defined]
        yield srv


def status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(key + ":"))


@dataclass
class Cost:
    """What one request cost the server: seconds, peak RSS growth (MiB), slowest ``/healthz`` (s)."""

    seconds: float = 0.0
    peak_mib: float = 0.0
    health_s: list[float] = field(default_factory=list)

    def check(self, seconds: float = SECONDS) -> None:
        assert self.health_s, "the /healthz probe got no answer"
        assert max(self.health_s) < HEALTH_S, f"/healthz took up to {max(self.health_s):.3f} s"
        assert self.peak_mib < PEAK_RSS_MIB, f"peak RSS grew {self.peak_mib:.0f} MiB"
        assert self.seconds < seconds, f"the request took {self.seconds:.1f} s"


@contextmanager
def weighed(base: str, pid: int) -> Iterator[Cost]:
    """Measure the requests made inside: the server's peak RSS is reset first, and ``/healthz`` is asked
    every 20 ms (a failed or 5 s probe counts as 5 s)."""
    cost = Cost()
    stop = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=base, timeout=5.0) as c:
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    ok = c.get("/healthz").status_code == 200
                except httpx.HTTPError:
                    ok = False
                cost.health_s.append(time.perf_counter() - t0 if ok else 5.0)
                time.sleep(0.02)

    with open(f"/proc/{pid}/clear_refs", "w") as fh:
        fh.write("5")  # VmHWM := VmRSS
    before = status_kib(pid, "VmHWM")
    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    time.sleep(0.05)
    t0 = time.perf_counter()
    try:
        yield cost
    finally:
        cost.seconds = time.perf_counter() - t0
        time.sleep(0.05)
        stop.set()
        prober.join(timeout=10)
        cost.peak_mib = (status_kib(pid, "VmHWM") - before) / 1024


def post(base: str, path: str, body: dict | bytes) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(base + path, content=content, headers={"content-type": "application/json"}, timeout=120)


def refused(
    server, send: Callable[[], httpx.Response], status: int, code: str | None = None
) -> tuple[dict, Cost]:
    """``send()`` under :func:`weighed`: its status (and error code), and its cost within the bounds."""
    with weighed(server.base, server.pid) as cost:
        resp = send()
    assert resp.status_code == status, resp.text[:1000]
    body = resp.json()
    if code is not None:
        assert body["error"]["code"] == code, body
    cost.check()
    return body, cost


def positions(server, segments: list[dict], model: str = "qwen2-vl", **extra) -> Callable[[], httpx.Response]:
    """A request to send, its body encoded now (so that the client's own work is not timed)."""
    content = json.dumps({"model": model, "segments": segments, **extra}).encode()
    return lambda: post(server.base, "/v1/positions", content)


# ----------------------------------------------------------------------------------------------- 1. keep


BIG = 2**31 - 1


@pytest.mark.parametrize(
    ("grid", "runs"),
    [
        ([1, BIG, BIG], [1, BIG]),  # 120 bytes: the old service expanded 2^31 bools (1.3 GB, 4-7 s)
        ([1, BIG, BIG], [BIG] * 466),  # the old service: MemoryError, a 500
        ([1, 400, 400], [BIG] * 3),  # a grid under the cap, a mask far over it
    ],
)
def test_keep_runs_are_weighed_before_they_are_expanded(server, grid, runs):
    image = {"type": "image", "grid": grid, "keep": {"runs": runs}}
    body, _ = refused(server, positions(server, [image]), 413, "too_many_tokens")
    assert body["error"]["cap"] == "MROPE_MAX_TOKENS"


def test_keep_runs_within_the_cap_still_prune(server):
    """The negative control: a mask that fits is decoded and applied (4 tokens, the last 2 dropped)."""
    image = {"type": "image", "grid": [1, 4, 4], "keep": {"runs": [2, 2]}}
    resp = post(server.base, "/v1/positions", {"model": "qwen2-vl", "segments": [image]})
    assert resp.status_code == 200, resp.text
    assert len(resp.json()["positions"][0]) == 2 + 2  # two kept vision tokens and the two wrappers


# ----------------------------------------------------------------------------------------------- 3. text


def test_a_huge_text_is_refused_while_it_is_counted(server):
    """3 MB of one-letter words: 1.5 M tokens, refused once the count passes the cap (the old service
    tokenized the whole text first: 1.2 GB for 6 MB)."""
    text = "w " * 1_500_000
    body, _ = refused(server, positions(server, [{"type": "text", "text": text}]), 413, "too_many_tokens")
    assert body["error"]["limit"] == MAX_TOKENS


def test_a_text_over_the_byte_bound_is_refused_unread(server):
    """More than 32 characters per token of MROPE_MAX_TOKENS: refused by its length alone."""
    text = "x" * (32 * MAX_TOKENS + 1)
    _, cost = refused(server, positions(server, [{"type": "text", "text": text}]), 413, "text_too_long")


def test_a_huge_layout_text_is_counted_off_the_event_loop(server):
    """An upload's layout text (3 MB) is tokenized in the worker pool (the old service tokenized it in
    the async route: the loop blocked 2.5-4.5 s)."""
    layout = json.dumps([{"type": "text", "text": "w " * 1_500_000}, {"type": "file", "index": 0}])
    png = tm.image_bytes(32, 32, "PNG")

    def send() -> httpx.Response:
        files = [("files", ("a.png", png))]
        return httpx.post(
            server.base + "/v1/positions/upload",
            data={"model": "qwen2-vl", "layout": layout},
            files=files,
            timeout=120,
        )

    refused(server, send, 413, "too_many_tokens")


def test_text_under_the_cap_keeps_its_ids(server):
    """The negative control: text under the cap is tokenized as before (one token per word)."""
    resp = post(
        server.base, "/v1/positions", {"model": "qwen2-vl", "segments": [{"type": "text", "text": "a b c"}]}
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["positions"][0] == [0, 1, 2]


# ------------------------------------------------------------------------------------------- 2. messages


def test_a_long_conversation_is_placed_in_linear_time(server):
    """1,500 messages (49 KB) under the chat template: 200, the loop free (the old service rendered the
    conversation up to each assistant turn twice, on the event loop: 5-8 s)."""
    messages = [{"role": ("user", "assistant")[k % 2], "content": f"turn number {k}"} for k in range(1500)]
    content = json.dumps({"model": "qwen2-vl", "messages": messages}).encode()
    with weighed(server.base, server.pid) as cost:
        resp = post(server.base, "/v1/positions", content)
    assert resp.status_code == 200, resp.text[:1000]
    # as many positions as the conversation, rendered here by jinja2 itself, has tokens
    text = (
        jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        .from_string(TEMPLATE)
        .render(messages=messages)
    )
    tokenizer = Tokenizer.from_file(server.tokenizer)
    assert len(resp.json()["positions"][0]) == len(tokenizer.encode(text, add_special_tokens=False).ids)
    cost.check(seconds=5.0)  # tenths of a second here; the definition's renders take tens of seconds


def test_a_huge_message_is_refused_while_it_is_counted(server):
    """A 3 MB message under the template (the old service kept every token's offsets as Python objects:
    +680 MB) and the same text as a plain turn without the template's route."""
    for content, code in (
        ("w " * 1_500_000, "too_many_tokens"),
        ("x" * (32 * MAX_TOKENS + 1), "text_too_long"),
    ):
        messages = [{"role": "user", "content": content}, {"role": "assistant", "content": "ok"}]
        body = json.dumps({"model": "qwen2-vl", "messages": messages}).encode()
        err, _ = refused(server, lambda: post(server.base, "/v1/positions", body), 413, code)  # noqa: B023
        assert err["error"]["cap"] == "MROPE_MAX_TOKENS"


# ------------------------------------------------------------------------------------- 4. nframes, 5. times


def test_nframes_is_bounded_by_the_video(server, tmp_path):
    """nframes: 16,000,000 on a 4-frame MP4 (the old service built 16 M frame indices and times)."""
    video = tm.write_video(tmp_path / "v.mp4", num_frames=4, fps=4).read_bytes()

    def upload(nframes: int) -> Callable[[], httpx.Response]:
        layout = json.dumps([{"type": "file", "index": 0, "nframes": nframes}])
        return lambda: httpx.post(
            server.base + "/v1/positions/upload",
            data={"model": "qwen3-vl", "layout": layout},
            files=[("files", ("v.mp4", io.BytesIO(video)))],
            timeout=120,
        )

    assert upload(4)().status_code == 200  # the negative control (first, so PyAV is loaded before timing)
    body, _ = refused(server, upload(16_000_000), 422, "too_many_frames")
    assert "the video has 4 frames" in body["error"]["message"]


def test_frame_times_must_match_the_grid(server):
    """One frame time on a [60000, 2, 2] grid (bare vision tokens, so no timestamp needs it) is a 422:
    the old service never compared them, and planned the 60,000 patches (200 after seconds)."""
    video = {"type": "video", "grid": [60_000, 2, 2], "frame_times": [0.0], "wrap": False}
    body, _ = refused(server, positions(server, [video], "qwen3-vl"), 422)
    assert "frame_times" in body["error"]["message"]
    good = {"type": "video", "grid": [3, 2, 2], "frame_times": [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]}
    assert positions(server, [good], "qwen3-vl")().status_code == 200  # the negative control


def test_frame_times_are_weighed_like_the_grid(server):
    """[60000, 2, 2] with its 120,000 frame times: the tokens plus the times to plan pass the cap, as
    without frame_times (the old service skipped the weighing when they were given)."""
    times = [k / 2 for k in range(120_000)]
    for video in (
        {"type": "video", "grid": [60_000, 2, 2], "frame_times": times, "wrap": False},
        {"type": "video", "grid": [60_000, 2, 2], "wrap": False},
    ):
        refused(server, positions(server, [video], "qwen3-vl"), 413, "too_many_tokens")


# ----------------------------------------------------------------------------------- 13. generation grids


def test_generation_grids_count_against_the_cap(server):
    """GLM-Image: four [1, 300, 300] grids left after the prompt are 360,000 decode positions, each grid
    under the cap, together over it."""
    ids = [[5, 6, 7]]  # a text prompt: every grid is an image to generate
    grid = [1, 300, 300]
    send = lambda: post(  # noqa: E731
        server.base, "/v1/rope-index", {"model": "glm-image", "input_ids": ids, "image_grid_thw": [grid] * 4}
    )
    body, _ = refused(server, send, 413, "too_many_tokens")
    assert "image_grid_thw" in body["error"]["message"]
    one = post(
        server.base, "/v1/rope-index", {"model": "glm-image", "input_ids": ids, "image_grid_thw": [grid]}
    )
    assert one.status_code == 200, one.text  # the negative control: one target fits


def test_position_sets_count_together_against_the_cap(server):
    """A positions array per set: MROPE_MAX_TOKENS bounds the tokens of all the sets of a request
    (four sets of 30,000 tokens is 120,000, over 100,000), refused before any set is built; three sets
    (90,000) are served, each set a whole answer (the control)."""
    text = [{"type": "text", "tokens": 30_000}]
    four = {"sets": {s: {} for s in "abcd"}, "pattern": list("abcd")}
    body, _ = refused(server, positions(server, text, layer_sets=four), 413, "too_many_tokens")
    assert "MROPE_MAX_TOKENS" in body["error"]["message"] and "4 position sets" in body["error"]["message"]
    assert "120,000" in body["error"]["message"]
    # each set is weighed under its own rules: merge_size 1 makes the image 4x the tokens of the model's
    image = [{"type": "image", "grid": [1, 300, 300]}]  # 22,500 + 2 tokens at merge 2, 90,000 + 2 at 1
    merged = {"sets": {"model": {}, "unmerged": {"merge_size": 1}}, "pattern": ["model", "unmerged"]}
    body, _ = refused(server, positions(server, image, layer_sets=merged), 413, "too_many_tokens")
    assert "is 112,500," in body["error"]["message"]  # refused by the floors (no wrappers) before a count
    three = {"sets": {s: {} for s in "abc"}, "pattern": list("abc")}
    resp = positions(server, text, layer_sets=three)()
    assert resp.status_code == 200, resp.text[:500]
    sets = resp.json()["position_sets"]
    assert [len(p["positions"][0]) for p in sets.values()] == [30_000] * 3


def test_rope_index_sets_count_together_against_the_cap(server):
    """/v1/rope-index with layer_sets: a [3, B, L] answer per set, so B*L counts once per set: 30,000
    ids under four sets (120,000) are refused before any set is computed, under three served."""
    ids = [[5] * 30_000]

    def send(names: str) -> Callable[[], httpx.Response]:
        sets = {"sets": {s: {} for s in names}, "pattern": list(names)}
        content = json.dumps({"model": "qwen2-vl", "input_ids": ids, "layer_sets": sets}).encode()
        return lambda: post(server.base, "/v1/rope-index", content)

    body, _ = refused(server, send("abcd"), 413, "too_many_tokens")
    assert "4 position sets" in body["error"]["message"] and "120,000" in body["error"]["message"]
    resp = send("abc")()
    assert resp.status_code == 200, resp.text[:500]  # the control
    assert [len(s["position_ids"][0][0]) for s in resp.json()["position_sets"].values()] == [30_000] * 3


def test_an_uploads_position_sets_count_together_against_the_cap(server, tmp_path):
    """The upload path: a file after 30,000 text tokens under four sets is over 120,000 tokens together,
    refused (413) before any set is built; under three sets (over 90,000) it is served (the control)."""
    image = tm.write_image(tmp_path / "i.png", 56, 56).read_bytes()
    layout = json.dumps([{"type": "text", "tokens": 30_000}, {"type": "file", "index": 0}])

    def upload(names: str) -> Callable[[], httpx.Response]:
        sets = json.dumps({"sets": {s: {} for s in names}, "pattern": list(names)})
        return lambda: httpx.post(
            server.base + "/v1/positions/upload",
            data={"model": "qwen2-vl", "layout": layout, "layer_sets": sets},
            files=[("files", ("i.png", io.BytesIO(image)))],
            timeout=120,
        )

    resp = upload("abc")()
    assert resp.status_code == 200, resp.text[:500]  # the control (first: the image reader is loaded)
    assert [len(p["positions"][0]) for p in resp.json()["position_sets"].values()] == [30_000 + 6] * 3
    body, _ = refused(server, upload("abcd"), 413, "too_many_tokens")
    assert "MROPE_MAX_TOKENS" in body["error"]["message"] and "4 position sets" in body["error"]["message"]


# ------------------------------------------------------------------------------------------ MemoryError


def test_memory_error_is_a_503_in_the_error_shape(tmp_path):
    """A server whose cap allows a request it has no memory for: the build's MemoryError is a 503 in the
    JSON error shape (never a 500), and the server goes on answering."""
    env = {"MROPE_MAX_TOKENS": str(1 << 60)}
    with serve(env=env) as srv:
        image = {"type": "image", "grid": [1, 1 << 21, 1 << 21], "wrap": False}
        with weighed(srv.base, srv.pid) as cost:
            resp = post(srv.base, "/v1/positions", {"model": "qwen2-vl", "segments": [image]})
        assert resp.status_code == 503, resp.text[:1000]
        assert resp.json()["error"]["code"] == "out_of_memory"
        cost.check()
        ok = post(
            srv.base, "/v1/positions", {"model": "qwen2-vl", "segments": [{"type": "text", "tokens": 3}]}
        )
        assert ok.status_code == 200
