"""The JSON schema covers the library: every field of :class:`mrope.Image`, :class:`mrope.Video` and
:class:`mrope.Audio` has a JSON form that round-trips through :func:`mrope.schema.parse_segments` and
:func:`mrope.schema.to_segments`, the OpenAPI schema documents the newer fields, and the docs list them.

Expected values: the library segments themselves (a round trip gives back what went in).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mrope import Audio, Image, Text, Video
from mrope.models import resolve_rules
from mrope.schema import AudioSegment, parse_request, parse_segments, to_segments
from mrope.schema._image import IMAGE_FORMS
from mrope.schema._video import VIDEO_FORMS
from mrope.service import Settings
from mrope.service.app import create_app

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(Settings()))


def _json_form(seg: Any) -> dict[str, Any]:
    """A library segment written as JSON, field by field (tuples as lists, a video's audio as an object)."""
    out: dict[str, Any] = {"type": type(seg).__name__.lower()}
    for f in dataclasses.fields(seg):
        value = getattr(seg, f.name)
        if isinstance(value, Audio):
            value = {
                k: getattr(value, k)
                for k in ("tokens", "seconds", "mel_frames")
                if getattr(value, k) is not None
            }
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


FULL = [
    Image(
        (1, 16, 24),
        tiles=(3, 2),
        tile_order=(5, 4, 3, 2, 1, 0),
        origin=(2, 3),
        wrap=False,
        thumbnail_grid=(1, 12, 8),
    ),
    Image((1, 8, 8), tiles=(2, 2), thumbnail=True),
    Image((1, 6, 4), generate=True),
    Video(
        (2, 8, 16),
        fps=1.5,
        second_per_grid=0.5,
        frame_times=(0.0, 0.5, 1.0, 1.5),
        wrap=False,
        tiles=(2, 1),
        thumbnail_grid=(1, 8, 12),
    ),
    Video((2, 4, 4), audio=Audio(7)),
    Audio(mel_frames=120, wrap=False),
]


def test_every_library_field_has_a_json_form_that_round_trips() -> None:
    """Pins the schema to the library: a field added to mrope.Image / Video / Audio without its JSON form
    (or without being passed on by image_from / video_from) fails here. ``record`` is the one field a
    request does not set: the loaders fill it with how they read a file (a grid has none)."""
    for lib, forms in ((Image, IMAGE_FORMS), (Video, VIDEO_FORMS), (Audio, (AudioSegment,))):
        fields = {f.name for f in dataclasses.fields(lib)} - {"record"}
        missing = fields - {k for form in forms for k in form.model_fields}
        assert not missing, f"{lib.__name__} fields without a JSON form: {sorted(missing)}"
    items = [_json_form(s) for s in FULL]
    rules = resolve_rules("qwen2.5-omni")
    assert to_segments(parse_segments(items), rules) == FULL
    assert all(getattr(s, "record", None) is None for s in to_segments(parse_segments(items), rules))
    assert to_segments(parse_segments(json.loads(json.dumps(items))), rules) == FULL  # and through JSON text
    assert to_segments(
        parse_request({"model": "qwen2-vl", "segments": [{"type": "text", "ids": [5, 6]}]}).segments, rules
    ) == [Text([5, 6])]


def test_openapi_documents_the_new_fields(client) -> None:
    comps = client.get("/openapi.json").json()["components"]["schemas"]
    image, video = comps["ImageGrid"]["properties"], comps["VideoGrid"]["properties"]
    assert {"generate", "thumbnail_grid"} <= set(image) and {"tiles", "thumbnail_grid"} <= set(video)
    assert "GLM-Image" in image["generate"]["description"]
    assert "generation_ids" in comps["PositionsResponse"]["properties"]


def test_docs_list_the_json_fields() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs"
    text = "".join((docs / page).read_text(encoding="utf-8") for page in ("service.md", "cli.md"))
    for words in (
        '"thumbnail_grid": [1, h, w]',
        '"generate": true',
        '"generation_ids"',
        "--thumbnail-grid",
        "--generate",
    ):
        assert words in text, words
