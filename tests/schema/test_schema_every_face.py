"""Every face reads the same JSON the same way: one table of requests, run through the service
(``POST /v1/positions``), ``mrope positions --spec``, ``mrope batch`` and :mod:`mrope.pipeline`.

An accepted request gives the same positions on every face, equal to :func:`mrope.build_positions` on
segments written out by hand here; a refused one is refused by every face with the same words. A media
path is the one place faces differ, on purpose: the command line and the pipeline read local files, the
service never does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from support import media

import mrope
from mrope import Image, Text, Video
from mrope._cli import main
from mrope.media import load_image
from mrope.pipeline import record_positions
from mrope.service import Settings
from mrope.service.app import create_app

pytestmark = pytest.mark.timeout(120)

M = "qwen2-vl"
TEXT = {"type": "text", "tokens": 3}

# (name, request body, the segments a reader would write by hand) -- accepted by every face
ACCEPTED: list[tuple[str, dict[str, Any], list[Any], dict[str, Any] | None]] = [
    ("token count", {"model": M, "segments": [{"type": "text", "tokens": 12}]}, [Text(12)], None),
    ("token ids", {"model": M, "segments": [{"type": "text", "ids": [5, 6, 7]}]}, [Text([5, 6, 7])], None),
    (
        "image grid, tiles, thumbnail",
        {
            "model": M,
            "segments": [TEXT, {"type": "image", "grid": [1, 8, 8], "tiles": [2, 1], "thumbnail": True}],
        },
        [Text(3), Image(grid=(1, 8, 8), tiles=(2, 1), thumbnail=True)],
        None,
    ),
    (
        "image size",
        {"model": M, "segments": [{"type": "image", "height": 56, "width": 84}]},
        [Image(grid=(1, 4, 6))],  # 56x84 px is already a multiple of 28: 4x6 patches of 14 px
        None,
    ),
    (
        "video grid and rate",
        {"model": M, "segments": [{"type": "video", "grid": [4, 4, 4], "fps": 2.0, "wrap": False}]},
        [Video(grid=(4, 4, 4), fps=2.0, wrap=False)],
        None,
    ),
    (
        "null is absent",
        {"model": M, "segments": [{"type": "text", "tokens": 2, "ids": None, "grid": None}], "rules": None},
        [Text(2)],
        None,
    ),
    (
        "rules override, model alias",
        {
            "model": "qwen2_5_vl",
            "segments": [{"type": "image", "grid": [1, 4, 8]}],
            "rules": {"spatial": "reset"},
        },
        [Image(grid=(1, 4, 8))],
        {"model": "qwen2.5-vl", "rules": {"spatial": "reset"}},
    ),
]

# (name, request body, words every face's error contains)
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    (
        "float token count",
        {"model": M, "segments": [{"type": "text", "tokens": 12.0}]},
        "segment 0 tokens: Input should be a valid integer",
    ),
    (
        "string token count",
        {"model": M, "segments": [{"type": "text", "tokens": "3"}]},
        "segment 0 tokens: Input should be a valid integer",
    ),
    (
        "negative count",
        {"model": M, "segments": [{"type": "text", "tokens": -1}]},
        "segment 0 tokens: Input should be greater than or equal to 0",
    ),
    (
        "unknown field",
        {"model": M, "segments": [{"type": "video", "grid": [2, 4, 4], "speed": 2}]},
        "segment 0: unknown field 'speed'",
    ),
    (
        "int as bool",
        {"model": M, "segments": [{"type": "image", "grid": [1, 4, 4], "wrap": 1}]},
        "segment 0 wrap: Input should be a valid boolean",
    ),
    ("unknown type", {"model": M, "segments": [{"type": "smell"}]}, "segment 0: type must be one of"),
    (
        "two image forms",
        {"model": M, "segments": [{"type": "image", "grid": [1, 4, 4], "height": 8, "width": 8}]},
        "takes one of grid, height+width, path",
    ),
    (
        "zero fps",
        {"model": M, "segments": [{"type": "video", "grid": [2, 4, 4], "fps": 0}]},
        "segment 0 fps: Input should be greater than or equal to 0.001",
    ),
    ("unknown model", {"model": "qwen9", "segments": [TEXT]}, "unknown model 'qwen9'"),
    (
        "unknown rule",
        {"model": M, "segments": [TEXT], "rules": {"colour": 1}},
        "rules: unknown field 'colour'",
    ),
    (
        "grid off the merge size",
        {"model": M, "segments": [{"type": "image", "grid": [1, 15, 16]}]},
        "multiples of the merge size 2",
    ),
    ("no model", {"segments": [TEXT]}, "name one of qwen2-vl"),
]


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(Settings()))


def service_face(client: TestClient, body: dict[str, Any], tmp: Path) -> tuple[bool, Any]:
    resp = client.post("/v1/positions", json=body)
    if resp.status_code == 200:
        return True, resp.json()["positions"]
    assert resp.status_code in (400, 413, 422), resp.text
    return False, resp.json()["error"]["message"]


def spec_face(capsys: pytest.CaptureFixture[str], body: dict[str, Any], tmp: Path) -> tuple[bool, Any]:
    spec = tmp / "spec.json"
    spec.write_text(json.dumps(body))
    code = main(["positions", "--spec", str(spec), "--json"])
    out, err = capsys.readouterr()
    if code == 0:
        return True, json.loads(out)["positions"]
    assert code == 2 and err.count("\n") == 1, err
    return False, err


def batch_face(capsys: pytest.CaptureFixture[str], body: dict[str, Any], tmp: Path) -> tuple[bool, Any]:
    jsonl = tmp / "one.jsonl"
    jsonl.write_text(json.dumps({"id": "s", **body}) + "\n")
    code = main(["batch", str(jsonl), "--out-dir", str(tmp / "out"), "--format", "json", "--quiet"])
    capsys.readouterr()
    (entry,) = [json.loads(line) for line in (tmp / "out" / "manifest.jsonl").read_text().splitlines()]
    if code == 0:
        return True, json.loads((tmp / "out" / "s.json").read_text())["positions"]
    assert code == 1 and entry["error"]
    return False, entry["error"]


def pipeline_face(body: dict[str, Any], tmp: Path) -> tuple[bool, Any]:
    try:
        return True, record_positions(body).ids.tolist()
    except mrope.MRopeError as exc:
        return False, str(exc)


FACES = ("service", "spec", "batch", "pipeline")


def run_face(face: str, client: TestClient, capsys: Any, body: dict[str, Any], tmp: Path) -> tuple[bool, Any]:
    tmp = tmp / face
    tmp.mkdir(exist_ok=True)
    if face == "service":
        return service_face(client, body, tmp)
    if face == "spec":
        return spec_face(capsys, body, tmp)
    if face == "batch":
        return batch_face(capsys, body, tmp)
    return pipeline_face(body, tmp)


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize(("name", "body", "segments", "how"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_accepted_everywhere_with_the_same_positions(
    client, capsys, tmp_path, face, name, body, segments, how
) -> None:
    how = how or {"model": body["model"], "rules": body.get("rules")}
    expected = mrope.build_positions(segments, model=how["model"], rules=how["rules"])
    ok, got = run_face(face, client, capsys, body, tmp_path)
    assert ok, f"{face} refused {name}: {got}"
    assert got == expected.ids.tolist()


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize(("name", "body", "words"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_everywhere_with_the_same_words(client, capsys, tmp_path, face, name, body, words) -> None:
    ok, message = run_face(face, client, capsys, body, tmp_path)
    assert not ok, f"{face} accepted {name}"
    assert words in message, f"{face}: {message}"


def test_media_paths_are_read_only_where_a_face_says_so(client, capsys, tmp_path) -> None:
    cat = media.write_image(tmp_path / "cat.png", 448, 336)
    body = {"model": M, "segments": [TEXT, {"type": "image", "path": str(cat)}]}
    expected = mrope.build_positions([Text(3), load_image(cat, model=M)], model=M).ids.tolist()
    for face in ("spec", "batch", "pipeline"):
        assert run_face(face, client, capsys, body, tmp_path) == (True, expected), face
    ok, message = run_face("service", client, capsys, body, tmp_path)
    assert not ok and "segment 1: " in message and "is a local file, which is not read here" in message
