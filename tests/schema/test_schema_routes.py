"""``route`` through every face that reads local media: ``mrope positions --spec`` (the record's
``route`` and ``--route``), ``mrope batch`` and :mod:`mrope.pipeline` (the record's and the job's).

The photo is stored 640 x 480 (w x h) with EXIF orientation 6 (a portrait phone photo). Expected grids,
by hand with the Qwen ``smart_resize`` rule at factor 28 (transformers 5.24
models/qwen2_vl/image_processing_qwen2_vl.py:63): the stored 480 x 640 (h x w) rounds to 476 x 644, grid
(1, 34, 46) under ``"qwen-vl-utils"`` (no transpose); upright 640 x 480 (h x w) rounds to 644 x 476, grid
(1, 46, 34) under ``"processor"`` and ``"vllm"``. tests/media/test_routes.py checks these grids against
each route's own code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support import media

import mrope
from mrope import Image, Text
from mrope._cli import main
from mrope.pipeline import Preprocessor
from mrope.service import Settings
from mrope.service.app import create_app

pytestmark = pytest.mark.timeout(120)

M = "qwen2.5-vl"
GRIDS = {"qwen-vl-utils": (1, 34, 46), "processor": (1, 46, 34), "vllm": (1, 46, 34)}


@pytest.fixture(scope="module")
def photo(tmp_path_factory) -> Path:
    return media.write_image(tmp_path_factory.mktemp("faces") / "portrait.jpg", 640, 480, orientation=6)


def _record(photo: Path, route: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": M,
        "segments": [{"type": "text", "tokens": 3}, {"type": "image", "path": str(photo)}],
    }
    if route is not None:
        body["route"] = route
    return body


def _expected(route: str) -> list[list[int]]:
    return mrope.build_positions([Text(3), Image(grid=GRIDS[route])], model=M).ids.tolist()


def _spec(capsys, tmp: Path, body: dict[str, Any], *flags: str) -> list[list[int]]:
    spec = tmp / "spec.json"
    spec.write_text(json.dumps(body))
    assert main(["positions", "--spec", str(spec), "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)["positions"]


def _batch(capsys, tmp: Path, body: dict[str, Any], *flags: str) -> list[list[int]]:
    jsonl = tmp / "one.jsonl"
    jsonl.write_text(json.dumps({"id": "s", **body}) + "\n")
    assert (
        main(["batch", str(jsonl), "--out-dir", str(tmp / "out"), "--format", "json", "--quiet", *flags]) == 0
    )
    capsys.readouterr()
    return json.loads((tmp / "out" / "s.json").read_text())["positions"]


@pytest.mark.parametrize("route", sorted(GRIDS))
def test_a_records_route_on_every_face(photo, capsys, tmp_path, route: str) -> None:
    want = _expected(route)
    body = _record(photo, route)
    assert _spec(capsys, tmp_path, body) == want
    assert _batch(capsys, tmp_path, body) == want
    assert Preprocessor().positions(body).ids.tolist() == want


@pytest.mark.parametrize("route", sorted(GRIDS))
def test_the_jobs_route_on_every_face(photo, capsys, tmp_path, route: str) -> None:
    want = _expected(route)
    body = _record(photo, None)
    assert _spec(capsys, tmp_path, body, "--route", route) == want
    assert _batch(capsys, tmp_path, body, "--route", route) == want
    assert Preprocessor(route=route).positions(body).ids.tolist() == want


def test_default_route_is_the_processor_and_the_job_wins(photo, capsys, tmp_path) -> None:
    body = _record(photo, None)
    assert Preprocessor().positions(body).ids.tolist() == _expected("processor")
    # negative control: the job's route replaces the record's
    named = _record(photo, "processor")
    assert _spec(capsys, tmp_path, named, "--route", "qwen-vl-utils") == _expected("qwen-vl-utils")
    assert _expected("qwen-vl-utils") != _expected("processor")


def test_an_unknown_route_is_refused_with_the_names(photo, capsys, tmp_path) -> None:
    with pytest.raises(
        mrope.MRopeError, match="route: Input should be 'processor', 'qwen-vl-utils' or 'vllm'"
    ):
        Preprocessor().positions(_record(photo, "qwen"))
    assert main(["positions", "--image", str(photo), "--model", M, "--route", "qwen"]) == 2
    assert "invalid choice: 'qwen'" in capsys.readouterr().err


def test_the_service_takes_a_route_field() -> None:
    """The service reads no local file; its JSON body takes the same field, with the same refusal."""
    from fastapi.testclient import TestClient

    client = TestClient(create_app(Settings()))
    body = {
        "model": M,
        "route": "qwen-vl-utils",
        "segments": [{"type": "image", "height": 480, "width": 640}],
    }
    assert client.post("/v1/positions", json=body).status_code == 200
    resp = client.post("/v1/positions", json={**body, "route": "qwen"})
    assert (
        resp.status_code == 422
        and "'processor', 'qwen-vl-utils' or 'vllm'" in resp.json()["error"]["message"]
    )


def test_model_and_model_dir_agree_under_a_route_on_the_command_line(capsys, tmp_path) -> None:
    """``--model`` and ``--model-dir`` of a released-style Qwen2.5-VL folder (only preprocessor_config.json)
    size a 320 x 240 clip alike under ``--route qwen-vl-utils`` (qwen-vl-utils' own video constants;
    tests/media/test_routes.py checks them against fetch_video)."""
    from support.checkpoints import QWEN2_5_VL_PREPROCESSOR, qwen2_5_vl_config, write_checkpoint

    clip = media.write_video(tmp_path / "clip.mp4", 24, 12, 320, 240)
    folder = write_checkpoint(
        tmp_path / "ckpt",
        qwen2_5_vl_config(),
        preprocessor_config=QWEN2_5_VL_PREPROCESSOR,
    )
    answers = []
    for source in (["--model", M], ["--model-dir", str(folder)]):
        assert main(["positions", "--video", str(clip), *source, "--route", "qwen-vl-utils", "--json"]) == 0
        answers.append(json.loads(capsys.readouterr().out)["positions"])
    assert answers[0] == answers[1]
