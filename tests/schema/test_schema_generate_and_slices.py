"""The JSON form of GLM-Image's images to generate and MiniCPM-V 4.7's sliced images and video frames, on
every face: the service (``POST /v1/positions``, JSON and npy), ``mrope positions --spec``, the command
line's own segment flags, ``mrope batch`` and the pipeline (an Arrow batch, as Ray and ``datasets`` give
it).

Expected values come from transformers 5.24's own ``get_rope_index`` of each family (bound to a minimal
object holding the class-default config, as in ``tests/models/test_family_glm_image.py`` and
``tests/models/test_family_minicpmv4_7.py``), fed token ids laid out here by hand as each processor writes them
(GLM-Image: ``<start>`` placeholders ``<end>`` per source image, nothing for a target, grids of the
sources then the targets; MiniCPM-V 4.7: ``<image>`` thumbnail ``</image>`` then rows of ``<slice>`` crop
``</slice>`` joined by a newline, video frames back to back), and GLM-Image's decode cache
``_cached_decode_position_ids`` for ``generation_ids``. A refused combination is a 422 on the service, an
error on the other faces, with the same words naming the fields.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
from fastapi.testclient import TestClient
from support.hf_reference import MINICPM_IDS, MiniCPMRopeIndex
from transformers.models.glm_image.configuration_glm_image import GlmImageConfig
from transformers.models.glm_image.modeling_glm_image import GlmImageModel

from mrope import Image, LayoutError, TokenError, Video, build_positions, count_tokens
from mrope._cli import main
from mrope.models import resolve_rules
from mrope.pipeline import Preprocessor
from mrope.schema import parse_segments, to_segments
from mrope.service import Settings
from mrope.service import _token_caps as token_caps
from mrope.service.app import create_app

pytestmark = pytest.mark.timeout(120)

FILL = 7  # the id of text given as a count on the command line is mrope.TEXT_FILL_ID; any non-marker id

# ----------------------------------------------------------------------------------- GLM-Image

G_START, G_END, G_PAD = 16384, 16385, 167855  # GlmImageConfig's image start / end / placeholder ids


class _GlmImage:
    """The two methods GLM-Image's get_rope_index uses, on an object that holds only the config."""

    get_rope_index = GlmImageModel.get_rope_index
    get_vision_position_ids = GlmImageModel.get_vision_position_ids

    def __init__(self) -> None:
        self.config = GlmImageConfig()


def glm_image_reference(
    ids: list[int], sources: list[list[int]], targets: list[list[int]]
) -> tuple[list[list[int]], list[list[int]]]:
    """transformers' prefill positions ``[3][T]`` and decode positions ``[3][n + 1]`` (the n target
    tokens and the end marker) of one prompt."""
    model = _GlmImage()
    grids = torch.tensor(sources + targets, dtype=torch.long)
    per_sample = torch.tensor([len(sources) + len(targets)])
    pos, _ = model.get_rope_index(
        torch.tensor([ids]), grids, per_sample, attention_mask=torch.ones(1, len(ids), dtype=torch.long)
    )
    n = sum(t * h * w for t, h, w in targets) + 1
    return pos[:, 0].tolist(), model._cached_decode_position_ids[0, :, :n].tolist()


def glm_image_tokens(text: list[list[int]], sources: list[list[int]]) -> list[int]:
    """Text runs with a source image after each but the last (``<start>`` placeholders ``<end>``)."""
    out: list[int] = []
    for k, run in enumerate(text):
        out += run
        if k < len(sources):
            _, h, w = sources[k]
            out += [G_START, *[G_PAD] * (h * w), G_END]
    return out


GLM_TEXT = [[11, 12, 13, 14], [21, 22, 23, 24, 25, 26], [31, 32]]
GLM_SOURCES = [[1, 3, 5], [1, 2, 4]]
GLM_TARGETS = [[1, 4, 4], [1, 3, 2]]  # text-to-image: the large target, then the small preview
GLM_BODY = {
    "model": "glm-image",
    "segments": [
        {"type": "text", "ids": GLM_TEXT[0]},
        {"type": "image", "grid": GLM_SOURCES[0]},
        {"type": "text", "ids": GLM_TEXT[1]},
        {"type": "image", "grid": GLM_SOURCES[1]},
        {"type": "text", "ids": GLM_TEXT[2]},
        {"type": "image", "grid": GLM_TARGETS[0], "generate": True},
        {"type": "image", "grid": GLM_TARGETS[1], "generate": True},
    ],
}
GLM_FLAGS = [
    "--model",
    "glm-image",
    "--text",
    "4",
    "--image-grid",
    "1,3,5",
    "--text",
    "6",
    "--image-grid",
    "1,2,4",
    "--text",
    "2",
    "--image-grid",
    "1,4,4",
    "--generate",
    "--image-grid",
    "1,3,2",
    "--generate",
]


def glm_expected(filler: bool = False) -> dict[str, Any]:
    text = [[FILL] * len(run) for run in GLM_TEXT] if filler else GLM_TEXT
    pos, gen = glm_image_reference(glm_image_tokens(text, GLM_SOURCES), GLM_SOURCES, GLM_TARGETS)
    return {"positions": pos, "generation_ids": gen, "image_grid_thw": GLM_SOURCES + GLM_TARGETS}


# ------------------------------------------------------------------------------- MiniCPM-V 4.7

IM_START, IM_END, SLICE_START, SLICE_END, NEWLINE, IMAGE, VIDEO = MINICPM_IDS.values()  # stand-in marker ids
MARKERS = {
    "vision_start_id": IM_START,
    "vision_end_id": IM_END,
    "slice_start_id": SLICE_START,
    "slice_end_id": SLICE_END,
    "newline_id": NEWLINE,
    "image_pad_id": IMAGE,
    "video_pad_id": VIDEO,
}
MERGE = 4  # the class default downsample_mode "16x": 4 x 4 patches per token


def minicpm_picture(
    pad: int, thumb: tuple[int, int], rows: int, cols: int, crop: tuple[int, int]
) -> list[int]:
    """One picture (an image or a video frame) as the processor writes it: the thumbnail, then ``rows``
    lines of ``cols`` slices joined by a newline."""
    out = [IM_START, *[pad] * (thumb[0] * thumb[1] // MERGE**2), IM_END]
    line = [SLICE_START, *[pad] * (crop[0] * crop[1] // MERGE**2), SLICE_END] * cols
    for r in range(rows):
        out += ([NEWLINE] if r else []) + line
    return out


MC_TEXT = [[11, 12], [21, 22, 23], [31]]
# an image: grid 16x24 patches in 3 columns x 2 rows of 8x8 slices, a 12x8 thumbnail before them;
# a two-frame video: each frame 8x16 in 2 columns x 1 row of 8x8 slices, an 8x12 thumbnail before them
MC_BODY = {
    "model": "minicpm-v-4.7",
    "rules": MARKERS,
    "segments": [
        {"type": "text", "ids": MC_TEXT[0]},
        {"type": "image", "grid": [1, 16, 24], "tiles": [3, 2], "thumbnail_grid": [1, 12, 8]},
        {"type": "text", "ids": MC_TEXT[1]},
        {"type": "video", "grid": [2, 8, 16], "tiles": [2, 1], "thumbnail_grid": [1, 8, 12]},
        {"type": "text", "ids": MC_TEXT[2]},
    ],
}
MC_FLAGS = [
    "--model",
    "minicpm-v-4.7",
    *[a for k, v in MARKERS.items() for a in ("--rule", f"{k}={v}")],
    "--text",
    "2",
    "--image-grid",
    "1,16,24",
    "--tiles",
    "3x2",
    "--thumbnail-grid",
    "1,12,8",
    "--text",
    "3",
    "--video-grid",
    "2,8,16",
    "--tiles",
    "2x1",
    "--thumbnail-grid",
    "1,8,12",
    "--text",
    "1",
]


def mc_expected(filler: bool = False) -> dict[str, Any]:
    text = [[FILL] * len(run) for run in MC_TEXT] if filler else MC_TEXT
    image = minicpm_picture(IMAGE, (12, 8), 2, 3, (8, 8))
    frame = minicpm_picture(VIDEO, (8, 12), 1, 2, (8, 8))
    ids = text[0] + image + text[1] + frame + frame + text[2]
    image_sizes = [[12, 8]] + [[8, 8]] * 6
    video_sizes = ([[8, 12]] + [[8, 8]] * 2) * 2
    t_ids = torch.tensor([ids])
    types = (t_ids == IMAGE).long() + 2 * (t_ids == VIDEO).long()
    pos, deltas = MiniCPMRopeIndex().get_rope_index(
        t_ids, types, torch.tensor(image_sizes), torch.tensor(video_sizes), "16x", torch.ones_like(t_ids)
    )
    return {
        "positions": pos[:, 0].tolist(),
        "delta": int(deltas[0, 0]),
        "image_grid_thw": [[1, *s] for s in image_sizes],
        "video_grid_thw": [[1, *s] for s in video_sizes],
    }


# ------------------------------------------------------------------------------------- faces

CASES = {"glm-image": (GLM_BODY, GLM_FLAGS, glm_expected), "minicpm-v-4.7": (MC_BODY, MC_FLAGS, mc_expected)}


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(Settings()))


def assert_matches(doc: dict[str, Any], want: dict[str, Any], face: str) -> None:
    for key, value in want.items():
        assert doc[key] == value, f"{face}: {key}"
    if "generation_ids" not in want:
        assert doc.get("generation_ids") is None, f"{face}: generation_ids without images to generate"


@pytest.mark.parametrize("family", CASES)
def test_service_gives_the_models_positions(client, family) -> None:
    body, _, expected = CASES[family]
    want = expected()
    resp = client.post("/v1/positions", json=body)
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert_matches(doc, want, "service JSON")
    npy = client.post("/v1/positions", json=body, headers={"accept": "application/x-npy"})
    assert npy.status_code == 200, npy.text
    assert np.load(io.BytesIO(npy.content)).tolist() == want["positions"]
    header = npy.headers.get("x-mrope-generation-ids")
    assert (None if header is None else json.loads(header)) == want.get("generation_ids")


def test_npy_leaves_out_a_long_generation_ids_header() -> None:
    # a 64x64 target: 4097 decode positions a row, far over 200 bytes of header
    body = {
        "model": "glm-image",
        "segments": [{"type": "text", "tokens": 2}, {"type": "image", "grid": [1, 64, 64], "generate": True}],
    }
    with TestClient(create_app(Settings(npy_max_header_bytes=200))) as c:
        resp = c.post("/v1/positions", json=body, headers={"accept": "application/x-npy"})
        full = c.post("/v1/positions", json=body).json()
    assert resp.status_code == 200 and "x-mrope-generation-ids" not in resp.headers
    assert "X-MRope-Generation-Ids" in resp.headers["x-mrope-omitted"]
    assert len(full["generation_ids"][0]) == 64 * 64 + 1  # the JSON form always carries it


@pytest.mark.parametrize("family", CASES)
def test_command_line_spec_and_flags_give_the_models_positions(capsys, tmp_path, family) -> None:
    body, flags, expected = CASES[family]
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(body))
    assert main(["positions", "--spec", str(spec), "--json"]) == 0
    assert_matches(json.loads(capsys.readouterr().out), expected(), "--spec")
    # the flags give text as counts: the model's positions of the same layout with filler text ids
    assert main(["positions", *flags, "--json"]) == 0
    assert_matches(json.loads(capsys.readouterr().out), expected(filler=True), "flags")


@pytest.mark.parametrize("family", CASES)
def test_batch_gives_the_models_positions(capsys, tmp_path, family) -> None:
    body, _, expected = CASES[family]
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text(json.dumps({"id": "s", **body}) + "\n")
    out = tmp_path / "out"
    assert main(["batch", str(jsonl), "--out-dir", str(out), "--format", "json", "--quiet"]) == 0
    assert_matches(json.loads((out / "s.json").read_text()), expected(), "batch")


@pytest.mark.parametrize("family", CASES)
def test_pipeline_gives_the_models_positions(family) -> None:
    body, _, expected = CASES[family]
    want = expected()
    other = {
        "id": "t",
        "model": body["model"],
        "rules": body.get("rules"),
        "segments": [{"type": "text", "tokens": 3}],
    }
    # an Arrow batch, as Ray and datasets give it: fields absent in a row arrive as nulls
    table = pa.Table.from_pylist([{"id": "s", **body}, other])
    out = Preprocessor(model=body["model"]).batch(table).to_pylist()
    assert out[0]["error"] == "" and out[1]["error"] == ""
    assert_matches(out[0], want, "pipeline")
    if "generation_ids" in want:  # a GLM-Image job has the column, [3, 0] for a record without targets
        assert out[1]["generation_ids"] == [[], [], []]
        assert out[1]["positions"] == [[0, 1, 2]] * 3
    else:
        assert "generation_ids" not in out[0]


def test_a_job_without_the_column_refuses_images_to_generate() -> None:
    row = Preprocessor().record(GLM_BODY)  # the record names the model; the job's columns have no room
    assert "generation_ids" in row["error"] and "model= is 'glm-image'" in row["error"]
    assert row["positions"].shape == (3, 0)


# ---------------------------------------------------------------------------- refused, everywhere

MC = {"model": "minicpm-v-4.7", "rules": MARKERS}
GLM = {"model": "glm-image"}
REFUSED: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    (
        "thumbnail_grid without tiles",
        MC,
        {"type": "image", "grid": [1, 16, 24], "thumbnail_grid": [1, 12, 8]},
        "segment 0: thumbnail_grid (a thumbnail before the tiles) needs tiles [cols, rows] and no thumbnail",
    ),
    (
        "thumbnail_grid and thumbnail",
        MC,
        {
            "type": "image",
            "grid": [1, 16, 24],
            "tiles": [3, 2],
            "thumbnail": True,
            "thumbnail_grid": [1, 12, 8],
        },
        "got thumbnail true",
    ),
    (
        "image to generate with tiles",
        GLM,
        {"type": "image", "grid": [1, 4, 4], "tiles": [2, 2], "generate": True},
        "segment 0: generate (an image the model will generate) takes no tiles",
    ),
    (
        "image to generate from a file",
        GLM,
        {"type": "image", "path": "cat.png", "generate": True},
        "segment 0: generate goes with a grid or a size",
    ),
    (
        "generate as a number",
        GLM,
        {"type": "image", "grid": [1, 4, 4], "generate": 1},
        "segment 0 generate: Input should be a valid boolean",
    ),
    (
        "video tiles without thumbnail_grid",
        MC,
        {"type": "video", "grid": [2, 8, 16], "tiles": [2, 1]},
        "segment 0: a video's tiles and thumbnail_grid go together (MiniCPM-V's sliced frames); got tiles "
        "without thumbnail_grid",
    ),
    (
        "video thumbnail_grid without tiles",
        MC,
        {"type": "video", "grid": [2, 8, 16], "thumbnail_grid": [1, 8, 12]},
        "got thumbnail_grid without tiles",
    ),
    (
        "sliced frames of a video file",
        MC,
        {"type": "video", "path": "clip.mp4", "tiles": [2, 1], "thumbnail_grid": [1, 8, 12]},
        "segment 0: tiles, thumbnail_grid go with a grid",
    ),
    (
        "a thumbnail of two frames",
        MC,
        {"type": "image", "grid": [1, 16, 24], "tiles": [3, 2], "thumbnail_grid": [2, 12, 8]},
        "segment 0: thumbnail_grid is one frame, [1, h, w]; got [2, 12, 8]",
    ),
    (
        "a video thumbnail of many frames",
        MC,
        {"type": "video", "grid": [2, 8, 16], "tiles": [2, 1], "thumbnail_grid": [1000000, 8, 12]},
        "segment 0: thumbnail_grid is one frame, [1, h, w]; got [1000000, 8, 12]",
    ),
    (
        "an image to generate with frames",
        GLM,
        {"type": "image", "grid": [3, 2, 4], "generate": True},
        "is one 2-D target: a grid [1, h, w] or a size, no origin, wrapped; got grid [3, 2, 4]",
    ),
    (
        "an image to generate at an origin, unwrapped",
        GLM,
        {"type": "image", "grid": [1, 2, 4], "generate": True, "origin": [1, 1], "wrap": False},
        "is one 2-D target: a grid [1, h, w] or a size, no origin, wrapped; got origin [1, 1], wrap false",
    ),
    (
        "a thumbnail grid of two numbers",
        MC,
        {"type": "image", "grid": [1, 16, 24], "tiles": [3, 2], "thumbnail_grid": [12, 8]},
        "segment 0 thumbnail_grid: List should have at least 3 items",
    ),
]


@pytest.mark.parametrize(("name", "head", "segment", "words"), REFUSED, ids=[r[0] for r in REFUSED])
def test_bad_combinations_are_refused_with_the_fields_named(
    client, capsys, tmp_path, name, head, segment, words
) -> None:
    body = {**head, "segments": [segment]}
    resp = client.post("/v1/positions", json=body)
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["code"] == "validation_error"
    assert words in resp.json()["error"]["message"]
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(body))
    assert main(["positions", "--spec", str(spec), "--json"]) == 2
    assert words in capsys.readouterr().err
    row = Preprocessor(model=head["model"], base_dir=str(tmp_path)).record(body)
    assert words in row["error"]


def test_the_librarys_own_layout_errors_come_through(client) -> None:
    # targets before the prompt's text, and sliced frames under a family without the canvas rule
    late = {
        **GLM,
        "segments": [{"type": "image", "grid": [1, 2, 2], "generate": True}, {"type": "text", "tokens": 2}],
    }
    sliced = {
        "model": "qwen2-vl",
        "segments": [{"type": "video", "grid": [2, 8, 16], "tiles": [2, 1], "thumbnail_grid": [1, 8, 12]}],
    }
    sliced_image = {
        "model": "qwen2-vl",
        "segments": [{"type": "image", "grid": [1, 8, 16], "tiles": [2, 1], "thumbnail_grid": [1, 8, 12]}],
    }
    for body, words in (
        (late, "must come after every other segment"),
        (sliced, "need the canvas rule"),
        (sliced_image, "a sliced picture (tiles with thumbnail_grid) needs the canvas rule"),
    ):
        resp = client.post("/v1/positions", json=body)
        assert resp.status_code == 422 and resp.json()["error"]["code"] == "layout_error", resp.text
        assert words in resp.json()["error"]["message"]


def test_sliced_frames_count_their_thumbnails_against_the_token_cap() -> None:
    # 1000 frames of one 4x4 slice each, but a 4096x4096-patch thumbnail per frame: a million tokens each
    seg = {"type": "video", "grid": [1000, 4, 4], "tiles": [1, 1], "thumbnail_grid": [1, 4096, 4096]}
    with TestClient(create_app(Settings(max_tokens=100_000))) as c:
        resp = c.post("/v1/positions", json={**MC, "segments": [seg]})
    assert resp.status_code == 413 and resp.json()["error"]["cap"] == "MROPE_MAX_TOKENS", resp.text
    # per frame: one 4x4-patch slice (1 token, merge 4) between <slice> and </slice>, and the thumbnail's
    # 4096 * 4096 / 16 tokens between <image> and </image>
    assert "1,048,581,000" in resp.json()["error"]["message"]  # 1000 * (1 + 2 + 1048576 + 2)


def test_the_library_refuses_what_the_schema_refuses() -> None:
    """The same checks hold for library segments built by hand."""
    for make, words in (
        (lambda: Image(grid=(3, 2, 4), generate=True), "one 2-D target"),
        (lambda: Image(grid=(1, 2, 4), generate=True, origin=(1, 1)), "one 2-D target"),
        (lambda: Image(grid=(1, 2, 4), generate=True, wrap=False), "one 2-D target"),
        (lambda: Image(grid=(1, 16, 24), tiles=(3, 2), thumbnail_grid=(2, 12, 8)), "one frame"),
        (lambda: Video(grid=(2, 8, 16), tiles=(2, 1), thumbnail_grid=(9, 8, 12)), "one frame"),
    ):
        with pytest.raises(LayoutError, match=words):
            make()


@pytest.mark.parametrize(
    "segment",
    [
        {"type": "image", "grid": [1, 16, 24], "tiles": [3, 2], "thumbnail_grid": [1, 12, 8]},
        {"type": "video", "grid": [2, 8, 16], "tiles": [2, 1], "thumbnail_grid": [1, 8, 12]},
    ],
)
def test_sliced_pictures_without_marker_ids_are_refused_not_a_crash(
    client, capsys, tmp_path, segment
) -> None:
    """MiniCPM-V 4.7's registry rules have no marker ids until a checkpoint gives them: a sliced picture
    is a 422 naming them (it was a 500: the builder wrote the missing ids before any check)."""
    body = {"model": "minicpm-v-4.7", "segments": [{"type": "text", "tokens": 2}, segment]}
    resp = client.post("/v1/positions", json=body)
    assert resp.status_code == 422, resp.text
    assert "needs its marker ids" in resp.json()["error"]["message"]
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(body))
    assert main(["positions", "--spec", str(spec), "--json"]) == 2
    assert "needs its marker ids" in capsys.readouterr().err
    with pytest.raises(TokenError, match="needs its marker ids"):
        build_positions(
            to_segments(parse_segments(body["segments"]), resolve_rules("minicpm-v-4.7")),
            model="minicpm-v-4.7",
        )


def test_the_service_counts_every_token_of_a_sliced_picture() -> None:
    """The service decides from arithmetic whether a request is small enough to build on its event loop
    (and refuses one over the cap before building): for sliced pictures its count is exact. By hand, per
    picture (merge 4, 16 patches a token): <image> thumbnail </image>, then per slice <slice> crop
    </slice>, a newline between rows."""
    rules = resolve_rules("minicpm-v-4.7", MARKERS)
    cases = [
        # grid [1, 16, 24] in 3 x 2 slices, thumbnail 12 x 8: 2 + 6 + 24 + 2 * 6 + 1
        (Image(grid=(1, 16, 24), tiles=(3, 2), thumbnail_grid=(1, 12, 8)), 45),
        # two frames of 8 x 16 in 2 x 1 slices, thumbnail 8 x 12: 2 * (2 + 6 + 8 + 2 * 2 + 0)
        (Video(grid=(2, 8, 16), tiles=(2, 1), thumbnail_grid=(1, 8, 12)), 40),
        # a 724 x 724 grid in 181 x 181 one-token slices, a 4 x 4 thumbnail: the markers outnumber the crops
        (
            Image(grid=(1, 724, 724), tiles=(181, 181), thumbnail_grid=(1, 4, 4)),
            2 + 1 + 32761 + 2 * 32761 + 180,
        ),
    ]
    for seg, want in cases:
        assert token_caps.weigh([seg], rules).token_floor == want == count_tokens([seg], rules=rules)
    heavy = token_caps.weigh([cases[2][0]], rules)
    assert not heavy.light(Settings())  # 98,466 tokens: built off the event loop (it was counted 32,761)


def test_the_cap_message_says_it_counts_the_images_to_generate() -> None:
    body = {
        **GLM,
        "segments": [{"type": "text", "tokens": 3}, {"type": "image", "grid": [1, 64, 64], "generate": True}],
    }
    with TestClient(create_app(Settings(max_tokens=1000))) as c:
        resp = c.post("/v1/positions", json=body)
    assert resp.status_code == 413, resp.text
    # 3 prompt tokens and 64 * 64 target tokens (GLM-Image merges nothing)
    assert resp.json()["error"]["message"].startswith("the token count with the images to generate is 4,099,")


def test_a_job_from_a_checkpoint_folder_has_the_generation_column(tmp_path: Path) -> None:
    """``Preprocessor(model_dir=...)`` of a GLM-Image checkpoint decides the column from the checkpoint
    (it read only model=, so every record with targets was refused)."""
    (tmp_path / "config.json").write_text(json.dumps(GlmImageConfig().to_dict()))
    job = Preprocessor(model_dir=tmp_path)
    assert job.generates_images
    row = job.record({key: value for key, value in GLM_BODY.items() if key != "model"})
    assert row["error"] == ""
    assert_matches({k: np.asarray(v).tolist() for k, v in row.items()}, glm_expected(), "model_dir job")
