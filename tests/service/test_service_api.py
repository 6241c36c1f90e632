"""In-process tests of the JSON endpoints: results equal the library's, both output formats agree, and
every bad input is a 4xx in the one error shape."""

from __future__ import annotations

import io
import json
import time

import anyio
import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from tokenizers import Tokenizer, models, pre_tokenizers

import mrope
from mrope.models import PRESET_NAMES, SCHEME_NAMES, get_family
from mrope.service import Settings
from mrope.service import _token_caps as token_caps
from mrope.service._render import negotiate, npy_bytes
from mrope.service._settings import SettingsError
from mrope.service.app import create_app

NPY = {"accept": "application/x-npy"}


# ------------------------------------------------------------------------------------------ helpers


def make_tokenizer_file(path) -> str:
    """A tiny word-level tokenizer.json: enough for timestamp text and short prompts."""
    words = ["[UNK]", "<", ">", ".", "seconds", "hello", "world"] + [str(d) for d in range(10)]
    tok = Tokenizer(models.WordLevel({w: i + 1000 for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(True)])
    out = str(path / "tokenizer.json")
    tok.save(out)
    return out


def assert_error(resp: httpx.Response, status: int, code: str | None = None, cap: str | None = None) -> dict:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    err = resp.json()["error"]
    assert set(err) >= {"code", "message"} and err["message"], err
    if code is not None:
        assert err["code"] == code, err
    if cap is not None:
        assert err["cap"] == cap and cap in err["message"], err
    return err


def load_npy(resp: httpx.Response) -> np.ndarray:
    assert resp.headers["content-type"] == "application/x-npy"
    return np.load(io.BytesIO(resp.content), allow_pickle=False)


def expected(pos: mrope.Positions) -> dict:
    """The library's positions as a JSON answer carries them: ``to_dict()`` and each image's and video's
    media record (``null`` for one given by its grid)."""
    return {**pos.to_dict(), "media": [None if r is None else r.as_dict() for r in pos.media]}


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(Settings())) as c:
        yield c


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory):
    return make_tokenizer_file(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def tok_client(tokenizer_path):
    with TestClient(create_app(Settings(tokenizer=tokenizer_path))) as c:
        yield c


def small_client(**limits) -> TestClient:
    return TestClient(create_app(Settings(**limits)))


# ------------------------------------------------------------------------------------ /v1/positions

MIXED = [
    {"type": "text", "tokens": 5},
    {"type": "image", "grid": [1, 28, 28]},
    {"type": "text", "ids": [101, 102, 103]},
    {"type": "video", "grid": [8, 28, 28], "fps": 2.0},
    {
        "type": "image",
        "grid": [1, 8, 12],
        "tiles": [3, 2],
        "thumbnail": True,
        "tile_order": [5, 4, 3, 2, 1, 0],
    },
    {"type": "image", "grid": [1, 4, 4], "origin": [2, 3], "wrap": False},
    {"type": "video", "grid": [4, 8, 8], "second_per_grid": 0.5, "wrap": False},
    {"type": "video", "grid": [2, 4, 4], "frame_times": [0.0, 0.4, 0.9, 1.3]},
    {"type": "text", "tokens": 0},
]


def lib_segments(items: list[dict]) -> list:
    """The library segments a JSON segment list stands for (built independently of the service)."""
    out = []
    for it in items:
        kw = {k: tuple(v) if isinstance(v, list) else v for k, v in it.items() if k != "type"}
        if it["type"] == "text":
            out.append(mrope.Text(kw["tokens"] if "tokens" in kw else kw["ids"]))
        elif it["type"] == "image":
            out.append(mrope.Image(**kw))
        else:
            out.append(mrope.Video(**kw))
    return out


def _takes_mixed(model: str) -> bool:
    try:
        mrope.build_positions(lib_segments(MIXED), model=model, tokenizer=lambda text: [1])
    except mrope.MRopeError:
        return False
    return True


# the families (and research schemes) whose rules take every segment of MIXED (tiles, crops, 2-frame
# temporal patches)
MIXED_MODELS = [m for m in (*PRESET_NAMES, *SCHEME_NAMES) if _takes_mixed(m)]


@pytest.mark.parametrize("model", MIXED_MODELS)
def test_positions_equal_library(tok_client, tokenizer_path, model):
    resp = tok_client.post("/v1/positions", json={"model": model, "segments": MIXED})
    tok = Tokenizer.from_file(tokenizer_path)
    try:
        lib = mrope.build_positions(lib_segments(MIXED), model=model, tokenizer=tok)
    except mrope.MRopeError:  # a family without tiles or videos (HY-V4-VL): refused too, as a 422
        assert resp.status_code == 422 and resp.json()["error"]["code"] == "layout_error", resp.text
        return
    assert resp.status_code == 200, resp.text
    assert resp.json() == expected(lib)


TIMESTAMP_MODELS = [m for m in PRESET_NAMES if get_family(m).rules.temporal == "timestamps"]


@pytest.mark.parametrize("model", TIMESTAMP_MODELS)
def test_timestamp_videos_need_tokenizer(client, model):
    req = {"model": model, "segments": [{"type": "text", "tokens": 2}, {"type": "video", "grid": [2, 4, 4]}]}
    err = assert_error(client.post("/v1/positions", json=req), 422, "tokenizer_required", "MROPE_TOKENIZER")
    assert "segment 1" in err["message"]
    # bare vision tokens need no tokenizer
    req["segments"][1]["wrap"] = False
    assert client.post("/v1/positions", json=req).status_code == 200


def test_positions_rules_overrides_equal_library(client):
    rules = {"temporal": "seconds", "tokens_per_second": 4.0, "spatial": "centered", "crop": "keep"}
    resp = client.post("/v1/positions", json={"model": "qwen2-vl", "segments": MIXED, "rules": rules})
    assert resp.status_code == 200, resp.text
    assert resp.json() == expected(mrope.build_positions(lib_segments(MIXED), model="qwen2-vl", rules=rules))
    # null means "keep the preset's value"
    resp = client.post(
        "/v1/positions", json={"model": "qwen2-vl", "segments": MIXED, "rules": {"temporal": None}}
    )
    assert resp.json() == expected(mrope.build_positions(lib_segments(MIXED), model="qwen2-vl"))


@pytest.mark.filterwarnings("ignore::mrope.MRopeWarning")
def test_positions_notes_returned(client):
    # 8 fps under Qwen2.5-VL: patches share a time; the library notes it, the service returns the note
    seg = [{"type": "video", "grid": [4, 4, 4], "fps": 8.0}]
    body = client.post("/v1/positions", json={"model": "qwen2.5-vl", "segments": seg}).json()
    assert body["notes"] and "share t offset" in body["notes"][0]


@pytest.mark.parametrize("model", MIXED_MODELS)
def test_json_and_npy_agree(tok_client, tokenizer_path, model):
    client = tok_client
    segments = MIXED
    js = client.post("/v1/positions", json={"model": model, "segments": segments})
    npy = client.post("/v1/positions", json={"model": model, "segments": segments}, headers=NPY)
    assert js.status_code == npy.status_code == 200
    body = js.json()
    arr = load_npy(npy)
    lib = mrope.build_positions(
        lib_segments(segments), model=model, tokenizer=Tokenizer.from_file(tokenizer_path)
    )
    # int32 on the wire when every value fits (they do here), float32 for fractional time (docs/service.md)
    assert lib.ids.dtype.kind == "f" or lib.ids.max() <= np.iinfo(np.int32).max
    wire = lib.ids.dtype if lib.ids.dtype.kind == "f" else np.dtype(np.int32)
    assert arr.dtype == wire and arr.shape == lib.ids.shape == (lib.ids.shape[0], body["num_tokens"])
    assert arr.tolist() == body["positions"]
    assert float(npy.headers["x-mrope-delta"]) == body["delta"]  # float time under Qwen3-Omni
    assert int(npy.headers["x-mrope-num-tokens"]) == body["num_tokens"]
    assert json.loads(npy.headers["x-mrope-spans"]) == body["spans"]
    assert json.loads(npy.headers["x-mrope-image-grid-thw"]) == body["image_grid_thw"]
    assert json.loads(npy.headers["x-mrope-video-grid-thw"]) == body["video_grid_thw"]
    assert "x-mrope-omitted" not in npy.headers


def test_npy_omits_oversized_headers():
    with small_client(npy_max_header_bytes=200) as c:
        segs = [{"type": "image", "grid": [1, 2, 2]}] * 20
        resp = c.post("/v1/positions", json={"model": "qwen2-vl", "segments": segs}, headers=NPY)
    assert resp.status_code == 200
    assert "x-mrope-spans" not in resp.headers
    assert "X-MRope-Spans" in resp.headers["x-mrope-omitted"]
    assert load_npy(resp).shape == (3, 20 * 3)


def test_empty_sequence(client):
    body = client.post("/v1/positions", json={"model": "qwen2-vl", "segments": []}).json()
    assert body["positions"] == [[], [], []] and body["num_tokens"] == 0 and body["delta"] == 0


def test_image_from_pixel_size(client):
    # 750x1000 (h x w) -> 756x1008 -> grid (1, 54, 72) under Qwen2 rules (hand derivation with transformers
    # 5.24 models/qwen2_vl/image_processing_qwen2_vl.py:63 smart_resize)
    seg = {"type": "image", "height": 750, "width": 1000}
    body = client.post("/v1/positions", json={"model": "qwen2-vl", "segments": [seg]}).json()
    assert body["image_grid_thw"] == [[1, 54, 72]]
    assert (
        body["positions"]
        == mrope.build_positions([mrope.Image(grid=(1, 54, 72))], model="qwen2-vl").ids.tolist()
    )
    body = client.post(
        "/v1/positions",
        json={"model": "qwen2.5-vl", "segments": [{"type": "image", "height": 1080, "width": 1920}]},
    ).json()
    assert body["image_grid_thw"] == [
        [1, 78, 138]
    ]  # checkpoint bounds 3136..12845056: 1092 x 1932, no downscale


def test_text_as_string_needs_tokenizer(client, tok_client, tokenizer_path):
    req = {
        "model": "qwen2-vl",
        "segments": [{"type": "text", "text": "hello world"}, {"type": "image", "grid": [1, 4, 4]}],
    }
    assert_error(client.post("/v1/positions", json=req), 422, "tokenizer_required", "MROPE_TOKENIZER")
    body = tok_client.post("/v1/positions", json=req).json()
    tok = Tokenizer.from_file(tokenizer_path)
    ids = tok.encode("hello world", add_special_tokens=False).ids
    assert ids == [1005, 1006]
    assert body == expected(
        mrope.build_positions([mrope.Text(ids), mrope.Image(grid=(1, 4, 4))], model="qwen2-vl")
    )


def test_qwen3_video_timestamps(tok_client, tokenizer_path):
    seg = [{"type": "text", "tokens": 2}, {"type": "video", "grid": [3, 8, 8], "fps": 1.0}]
    body = tok_client.post("/v1/positions", json={"model": "qwen3-vl", "segments": seg}).json()
    tok = Tokenizer.from_file(tokenizer_path)
    lib = mrope.build_positions(
        [mrope.Text(2), mrope.Video(grid=(3, 8, 8), fps=1.0)], model="qwen3-vl", tokenizer=tok
    )
    assert body == expected(lib)
    assert [s["kind"] for s in body["spans"]].count("timestamp") == 3


def test_big_text_request(client):
    """A 1M-token request in both formats (its speed is measured by benchmarks/bench_service.py)."""
    req = {"model": "qwen2-vl", "segments": [{"type": "text", "tokens": 1_000_000}]}
    resp = client.post("/v1/positions", json=req)
    assert resp.status_code == 200
    assert resp.json()["positions"][2][-1] == 999_999
    resp = client.post("/v1/positions", json=req, headers=NPY)
    assert resp.status_code == 200
    arr = load_npy(resp)
    assert arr.shape == (3, 1_000_000) and arr[:, -1].tolist() == [999_999] * 3


# ------------------------------------------------------------------------------------ /v1/rope-index

IMG, VID, VS, VE = 151655, 151656, 151652, 151653


def token_batch():
    row0 = [1, 2, VS] + [IMG] * 4 + [VE, 3, VS] + [VID] * 8 + [VE, 4]
    row1 = [5, VS] + [IMG] * 16 + [VE, 6, 7, 8, 9]
    width = max(len(row0), len(row1))
    ids = [[0] * (width - len(r)) + r for r in (row0, row1)]
    mask = [[0] * (width - len(r)) + [1] * len(r) for r in (row0, row1)]
    return ids, mask, [[1, 4, 4], [1, 8, 8]], [[2, 4, 4]]


@pytest.mark.parametrize("model", ["qwen2-vl", "qwen2.5-vl"])
def test_rope_index_equal_library(client, model):
    ids, mask, img, vid = token_batch()
    req = {
        "model": model,
        "input_ids": ids,
        "attention_mask": mask,
        "image_grid_thw": img,
        "video_grid_thw": vid,
        "second_per_grid_ts": [1.5],
    }
    resp = client.post("/v1/rope-index", json=req)
    assert resp.status_code == 200, resp.text
    pos, deltas = mrope.numpy_rope_index(ids, img, vid, mask, model=model, second_per_grid_ts=[1.5])
    torch_pos, torch_deltas = mrope.get_rope_index(ids, img, vid, mask, model=model, second_per_grid_ts=[1.5])
    assert resp.json() == {"position_ids": pos.tolist(), "deltas": deltas.tolist()}
    assert torch_pos.tolist() == pos.tolist() and torch_deltas.reshape(-1).tolist() == deltas.tolist()
    npy = client.post("/v1/rope-index", json=req, headers=NPY)
    assert load_npy(npy).tolist() == pos.tolist()
    assert json.loads(npy.headers["x-mrope-deltas"]) == deltas.tolist()


def test_rope_index_type_ids_and_pad_position(client):
    ids, mask, img, vid = token_batch()
    types = [[1 if t == IMG else 2 if t == VID else 0 for t in row] for row in ids]
    req = {
        "model": "qwen2-vl",
        "input_ids": ids,
        "attention_mask": mask,
        "image_grid_thw": img,
        "video_grid_thw": vid,
        "mm_token_type_ids": types,
        "pad_position": 0,
    }
    resp = client.post("/v1/rope-index", json=req)
    pos, deltas = mrope.numpy_rope_index(
        ids, img, vid, mask, model="qwen2-vl", mm_token_type_ids=types, pad_position=0
    )
    assert resp.json() == {"position_ids": pos.tolist(), "deltas": deltas.tolist()}


def test_rope_index_errors(client):
    ids, mask, img, vid = token_batch()
    # one grid short: a token error that names the run, not a crash
    err = assert_error(
        client.post(
            "/v1/rope-index",
            json={"model": "qwen2-vl", "input_ids": ids, "image_grid_thw": img[:1], "video_grid_thw": vid},
        ),
        422,
        "token_error",
    )
    assert "image" in err["message"]
    assert_error(client.post("/v1/rope-index", json={"model": "qwen2-vl", "input_ids": [[1, 2], [3]]}), 422)
    assert_error(
        client.post(
            "/v1/rope-index", json={"model": "qwen2-vl", "input_ids": [[1]], "attention_mask": [[2]]}
        ),
        422,
        "validation_error",
    )
    assert_error(client.post("/v1/rope-index", json={"model": "qwen2-vl", "input_ids": [[2**63]]}), 422)
    assert_error(
        client.post(
            "/v1/rope-index", json={"model": "qwen2-vl", "input_ids": [[1]], "attention_mask": [[True]]}
        ),
        422,
        "validation_error",
    )


def test_rope_index_caps():
    with small_client(max_batch=2, max_tokens=100) as c:
        assert_error(
            c.post("/v1/rope-index", json={"model": "qwen2-vl", "input_ids": [[1]] * 3}),
            413,
            "too_many_rows",
            "MROPE_MAX_BATCH",
        )
        assert_error(
            c.post("/v1/rope-index", json={"model": "qwen2-vl", "input_ids": [[1] * 101]}),
            413,
            "too_many_tokens",
            "MROPE_MAX_TOKENS",
        )
        # a grid far larger than the sequence is refused by count, before the library sees it
        big = {"model": "qwen2-vl", "input_ids": [[IMG] * 4], "image_grid_thw": [[2**31 - 1, 2**30, 2**30]]}
        assert_error(c.post("/v1/rope-index", json=big), 413, "too_many_tokens", "MROPE_MAX_TOKENS")


# ------------------------------------------------------------------------------------ meta endpoints


def test_presets(client):
    body = client.get("/v1/presets").json()
    assert set(body["presets"]) == set(PRESET_NAMES)
    for name in PRESET_NAMES:
        assert body["presets"][name]["spec"] == json.loads(json.dumps(get_family(name).spec.to_dict()))
        assert body["presets"][name]["rules"] == json.loads(json.dumps(get_family(name).rules.to_dict()))


def test_health_openapi_docs(client):
    assert client.get("/healthz").json() == {"status": "ok", "version": mrope.__version__}
    schema = client.get("/openapi.json").json()
    assert {"/v1/positions", "/v1/rope-index", "/v1/positions/upload", "/v1/presets", "/healthz"} <= set(
        schema["paths"]
    )
    comps = schema["components"]["schemas"]
    assert (
        comps["PositionsRequest"]["properties"]["segments"]["items"]["discriminator"]["propertyName"]
        == "type"
    )
    # a model is a name, a Hugging Face model_type or a repo id: the names (families, then research
    # schemes) are the examples
    assert set(comps["PositionsRequest"]["properties"]["model"]["examples"]) == {*PRESET_NAMES, *SCHEME_NAMES}
    upload = schema["paths"]["/v1/positions/upload"]["post"]["requestBody"]["content"]
    assert "multipart/form-data" in upload
    assert "application/x-npy" in schema["paths"]["/v1/positions"]["post"]["responses"]["200"]["content"]
    docs = client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


# ---------------------------------------------------------------------------------------- bad input

BAD_BODIES = [
    ('{"model": "qwen2-vl", "segments": [', 400, "invalid_json"),
    ("not json at all", 400, "invalid_json"),
    ('{"model": "qwen9-vl", "segments": []}', 422, "validation_error"),
    ('{"model": "qwen2-vl"}', 422, "validation_error"),
    ('{"model": "qwen2-vl", "segments": [{"type": "audio"}]}', 422, "validation_error"),
    ('{"model": "qwen2-vl", "segments": [{"tokens": 3}]}', 422, "validation_error"),
    (
        '{"model": "qwen2-vl", "segments": [{"type": "text", "tokens": 3, "ids": [1]}]}',
        422,
        "validation_error",
    ),
    ('{"model": "qwen2-vl", "segments": [{"type": "text", "tokens": -1}]}', 422, "validation_error"),
    ('{"model": "qwen2-vl", "segments": [{"type": "text", "tokns": 3}]}', 422, "validation_error"),
    ('{"model": "qwen2-vl", "segments": [{"type": "image", "grid": [1, 2]}]}', 422, "validation_error"),
    ('{"model": "qwen2-vl", "segments": [{"type": "image", "grid": [0, 2, 2]}]}', 422, "validation_error"),
    ('{"model": "qwen2-vl", "segments": [{"type": "image", "grid": [1, 3, 3]}]}', 422, "layout_error"),
    ('{"model": "qwen2-vl", "segments": [{"type": "image", "height": 10}]}', 422, "validation_error"),
    (
        '{"model": "qwen2-vl", "segments": [{"type": "image", "grid": [1, 4, 4], "width": 10}]}',
        422,
        "validation_error",
    ),
    (
        '{"model": "qwen2-vl", "segments": [{"type": "image", "grid": [1, 4, 6], "tiles": [2, 2]}]}',
        422,
        "layout_error",
    ),
    (
        '{"model": "qwen2-vl", "segments": [{"type": "image", "grid": [1, 4, 4], "thumbnail": true}]}',
        422,
        "layout_error",
    ),
    (
        '{"model": "qwen2-vl", "segments": [{"type": "image", "height": 10, "width": 3000}]}',
        422,
        "invalid_media",
    ),
    (
        '{"model": "qwen2-vl", "segments": [{"type": "video", "grid": [2, 4, 4], "fps": 0}]}',
        422,
        "validation_error",
    ),
    (
        # NaN is not JSON (RFC 8259): refused by the parser
        '{"model": "qwen2-vl", "segments": [{"type": "video", "grid": [2, 4, 4], "fps": NaN}]}',
        400,
        "invalid_json",
    ),
    (
        '{"model": "qwen2-vl", "segments": [{"type": "video", "grid": [2, 4, 4], "frame_times": [1, 0]}]}',
        422,
        "layout_error",
    ),
    ('{"model": "qwen2-vl", "segments": [], "rules": {"merge_size": 0}}', 422, "layout_error"),
    ('{"model": "qwen2-vl", "segments": [], "rules": {"temporal": "hours"}}', 422, "validation_error"),
    ('{"model": "qwen2-vl", "segments": [], "rules": {"colour": 1}}', 422, "validation_error"),
    (
        '{"model": "qwen2-vl", "segments": [], "rules": {"timestamp_format": "{:>999999999}"}}',
        422,
        "validation_error",
    ),
    (
        '{"model": "qwen2-vl", "segments": [{"type": "text", "ids": [9223372036854775808]}]}',
        422,
        "validation_error",
    ),
    ("[]", 422, "validation_error"),
    # strict types, as the schema says
    ('{"model": "qwen2-vl", "segments": [{"type": "text", "tokens": "3"}]}', 422, "validation_error"),
    ('{"model": "qwen2-vl", "segments": [{"type": "image", "grid": [1, 2.0, 2]}]}', 422, "validation_error"),
    (
        '{"model": "qwen2-vl", "segments": [{"type": "image", "grid": [1, 2, 2], "wrap": 1}]}',
        422,
        "validation_error",
    ),
    # time values past any real video: the library would overflow int64 offsets silently
    (
        '{"model": "qwen2.5-vl", "segments": [{"type": "video", "grid": [4, 4, 4], "fps": 1e-300}]}',
        422,
        "validation_error",
    ),
    (
        '{"model": "qwen2.5-vl", "segments": [{"type": "video", "grid": [4, 4, 4], "second_per_grid": 1e300}]}',
        422,
        "validation_error",
    ),
    (
        '{"model": "qwen2.5-vl", "segments": [{"type": "video", "grid": [2, 4, 4], "frame_times": [0, 1e300]}]}',
        422,
        "validation_error",
    ),
    (
        '{"model": "qwen2.5-vl", "segments": [], "rules": {"tokens_per_second": 1e300}}',
        422,
        "validation_error",
    ),
    ('{"model": "qwen2.5-vl", "segments": [], "rules": {"fps": 1e-300}}', 422, "validation_error"),
]


@pytest.mark.parametrize("body,status,code", BAD_BODIES)
def test_bad_positions_bodies(client, body, status, code):
    resp = client.post("/v1/positions", content=body, headers={"content-type": "application/json"})
    assert_error(resp, status, code)


def test_validation_errors_name_the_field(client):
    err = assert_error(
        client.post(
            "/v1/positions", json={"model": "qwen2-vl", "segments": [{"type": "text", "tokens": -1}]}
        ),
        422,
    )
    assert err["message"].startswith("segment 0 tokens: ")
    assert err["details"][0]["loc"][:3] == ["body", "segments", 0]


def test_content_type_and_accept(client):
    req = json.dumps({"model": "qwen2-vl", "segments": []})
    assert_error(
        client.post("/v1/positions", content=req, headers={"content-type": "text/plain"}),
        415,
        "unsupported_media_type",
    )
    assert_error(client.post("/v1/positions", content=req), 415, "unsupported_media_type")
    assert_error(client.post("/v1/rope-index", content=req, headers={"content-type": "application/xml"}), 415)
    ok = client.post(
        "/v1/positions", content=req, headers={"content-type": "application/json; charset=utf-8"}
    )
    assert ok.status_code == 200
    assert_error(
        client.post(
            "/v1/positions", json={"model": "qwen2-vl", "segments": []}, headers={"accept": "text/html"}
        ),
        406,
        "not_acceptable",
    )
    assert_error(
        client.post("/v1/positions/upload", json={"model": "qwen2-vl"}), 415, "unsupported_media_type"
    )


def _router_only(app):
    """``app`` without its :class:`service.direct.DirectRoutes` layer: the hot endpoints go through
    FastAPI's router, exception middleware and route machinery like every other path."""
    from mrope.service._direct import DirectRoutes

    app.user_middleware = [m for m in app.user_middleware if m.cls is not DirectRoutes]
    return app


@pytest.mark.parametrize(
    "path,body,headers",
    [
        ("/v1/positions", {"model": "qwen2-vl", "segments": MIXED}, {}),
        ("/v1/positions", {"model": "qwen2-vl", "segments": MIXED}, NPY),
        ("/v1/positions", b'{"model": "qwen2-vl", "segments": [', {}),  # 400 invalid_json
        ("/v1/positions", {"model": "qwen2-vl", "segments": [{"type": "text", "tokens": -1}] * 30}, {}),
        ("/v1/positions", {"model": "qwen2-vl", "segments": [{"type": "image", "grid": [1, 3, 4]}]}, {}),
        ("/v1/positions", {"model": "qwen2-vl", "segments": [{"type": "text", "tokens": 99}]}, {}),  # 413
        ("/v1/positions", {"model": "qwen2-vl", "segments": [{"type": "text", "text": "hi"}]}, {}),
        ("/v1/rope-index", {"model": "qwen2-vl", "input_ids": [[1, 2, 3]]}, {}),
        ("/v1/rope-index", {"model": "qwen2-vl", "input_ids": [[1.5]]}, {}),
    ],
)
def test_direct_routes_answer_as_the_router_does(path, body, headers):
    """The hot endpoints skip the router (service.direct); every answer, errors included, is the one
    the FastAPI route gives: same status, headers and bytes (request ids pinned)."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = {"content-type": "application/json", "x-request-id": "same-id", **headers}
    answers = []
    for app in (create_app(Settings(max_tokens=64)), _router_only(create_app(Settings(max_tokens=64)))):
        with TestClient(app) as c:
            resp = c.post(path, content=content, headers=sent)
        answers.append(
            (resp.status_code, {k: v for k, v in resp.headers.items() if k != "date"}, resp.content)
        )
    assert answers[0] == answers[1]
    if answers[0][0] != 200:
        assert json.loads(answers[0][2])["error"]["request_id"] == "same-id"


def test_direct_route_bug_is_a_500_with_its_request_id(monkeypatch):
    """An exception no handler knows (a bug) reaches the access log middleware: 500 internal_error,
    with the request id, as on any other route."""
    import mrope.service._routes as service_routes

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(service_routes, "count_build_render", broken)
    with TestClient(create_app(Settings()), raise_server_exceptions=False) as c:
        resp = c.post(
            "/v1/positions", json={"model": "qwen2-vl", "segments": [{"type": "text", "tokens": 3}]}
        )
    err = assert_error(resp, 500, "internal_error")
    assert err["request_id"] == resp.headers["x-request-id"]
    assert "RuntimeError" in err["message"]


def test_routing_errors(client):
    assert_error(client.get("/v2/nothing"), 404, "not_found")
    resp = client.get("/v1/positions")
    assert_error(resp, 405, "method_not_allowed")
    assert resp.headers["allow"] == "POST"


@pytest.mark.parametrize(
    "accept,fmt",
    [
        (None, "json"),
        ("*/*", "json"),
        ("application/json", "json"),
        ("application/x-npy", "npy"),
        ("application/x-npy;q=0.5, application/json", "json"),
        ("application/json;q=0.2, application/x-npy", "npy"),
        ("text/html, */*;q=0.1", "json"),
        ("application/*;q=0.9, application/x-npy;q=0.9", "npy"),
    ],
)
def test_negotiate(accept, fmt):
    assert negotiate(accept) == fmt


# -------------------------------------------------------------------------------------------- caps


def test_token_cap_counted_before_building(monkeypatch):
    calls = []
    real = mrope.build_positions
    monkeypatch.setattr(mrope, "build_positions", lambda *a, **k: calls.append(1) or real(*a, **k))
    with small_client(max_tokens=1000) as c:
        # 2^31-1 x 2^30 x 2^30 patches: building it would need exabytes; the count refuses it first
        huge = {"type": "image", "grid": [2**31 - 1, 2**30, 2**30]}
        err = assert_error(
            c.post("/v1/positions", json={"model": "qwen2-vl", "segments": [huge]}),
            413,
            "too_many_tokens",
            "MROPE_MAX_TOKENS",
        )
        assert err["limit"] == 1000
        assert_error(
            c.post(
                "/v1/positions", json={"model": "qwen2-vl", "segments": [{"type": "text", "tokens": 1001}]}
            ),
            413,
            "too_many_tokens",
        )
        # a huge temporal extent is refused by arithmetic, before the library plans a block per patch
        t0 = time.perf_counter()
        long_video = {"type": "video", "grid": [2**31 - 1, 2, 2]}
        assert_error(
            c.post("/v1/positions", json={"model": "qwen3-vl", "segments": [long_video]}),
            413,
            "too_many_tokens",
        )
        assert_error(
            c.post("/v1/positions", json={"model": "qwen2-vl", "segments": [long_video]}),
            413,
            "too_many_tokens",
        )
        assert time.perf_counter() - t0 < 2.0
        # wrappers count too: 1000 vision tokens fit, their vision_start / vision_end do not
        assert_error(
            c.post(
                "/v1/positions",
                json={"model": "qwen2-vl", "segments": [{"type": "image", "grid": [10, 20, 20]}]},
            ),
            413,
            "too_many_tokens",
        )
        assert not calls
        ok = c.post(
            "/v1/positions", json={"model": "qwen2-vl", "segments": [{"type": "text", "tokens": 1000}]}
        )
        assert ok.status_code == 200 and calls


def test_other_caps():
    with small_client(max_segments=3, max_image_pixels=10_000, max_body_bytes=2000) as c:
        segs = [{"type": "text", "tokens": 1}] * 4
        assert_error(
            c.post("/v1/positions", json={"model": "qwen2-vl", "segments": segs}),
            413,
            "too_many_segments",
            "MROPE_MAX_SEGMENTS",
        )
        big = {"type": "image", "height": 101, "width": 100}
        assert_error(
            c.post("/v1/positions", json={"model": "qwen2-vl", "segments": [big]}),
            413,
            "image_too_large",
            "MROPE_MAX_IMAGE_PIXELS",
        )
        long = {"model": "qwen2-vl", "segments": [{"type": "text", "ids": list(range(1000))}]}
        assert_error(c.post("/v1/positions", json=long), 413, "payload_too_large", "MROPE_MAX_BODY_BYTES")

        def chunks():  # no Content-Length: counted while streaming
            yield b'{"model": "qwen2-vl", "segments": [{"type": "text", "ids": ['
            for _ in range(500):
                yield b"1234567890, "
            yield b"1]}]}"

        assert_error(
            c.post("/v1/positions", content=chunks(), headers={"content-type": "application/json"}),
            413,
            "payload_too_large",
            "MROPE_MAX_BODY_BYTES",
        )


def test_bad_content_length_header(client):
    resp = client.post(
        "/v1/positions", content=b"{}", headers={"content-type": "application/json", "content-length": "-5"}
    )
    assert_error(resp, 400, "bad_request")


# ---------------------------------------------------------------------------------- event loop


@pytest.mark.timeout(30)
def test_big_request_does_not_stall_others():
    app = create_app(Settings())
    finished: list[str] = []

    async def main() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:

            async def big() -> None:
                r = await c.post(
                    "/v1/positions",
                    json={"model": "qwen2-vl", "segments": [{"type": "text", "tokens": 1_000_000}]},
                )
                assert r.status_code == 200
                finished.append("big")

            async def health() -> None:
                await anyio.sleep(0.005)  # let the big one start
                for _ in range(5):
                    assert (await c.get("/healthz")).status_code == 200
                finished.append("health")

            async with anyio.create_task_group() as tg:
                tg.start_soon(big)
                tg.start_soon(health)

    anyio.run(main)
    assert finished == ["health", "big"]


# ---------------------------------------------------------------------------------------- settings


def test_settings_from_env(tmp_path):
    s = Settings.from_env(
        {"MROPE_MAX_TOKENS": "1_000", "MROPE_MAX_VIDEO_SECONDS": "12.5", "MROPE_TMP_DIR": str(tmp_path)}
    )
    assert s.max_tokens == 1000 and s.max_video_seconds == 12.5 and s.temp_root == str(tmp_path)
    assert Settings.from_env({}) == Settings()
    with pytest.raises(SettingsError, match="MROPE_MAX_TOKENS"):
        Settings.from_env({"MROPE_MAX_TOKENS": "lots"})
    with pytest.raises(SettingsError, match="MROPE_MAX_FILES"):
        Settings.from_env({"MROPE_MAX_FILES": "0"})
    with pytest.raises(SettingsError, match="MROPE_MEDIA_TIMEOUT_S"):
        Settings.from_env({"MROPE_MEDIA_TIMEOUT_S": "inf"})
    with pytest.raises(SettingsError, match="MROPE_TOKENIZER"):
        Settings.from_env({"MROPE_TOKENIZER": str(tmp_path / "missing.json")})
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(RuntimeError, match="MROPE_TOKENIZER"):
        create_app(Settings(tokenizer=str(bad)))


@pytest.mark.parametrize("shape", [(3, 0), (3, 5), (3, 2, 7), (3, 1, 0)])
def test_npy_bytes_equal_np_save(shape):
    arr = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape) - 3
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    assert npy_bytes(arr) == buf.getvalue()
    assert npy_bytes(arr[:, ::-1]) == npy_bytes(np.ascontiguousarray(arr[:, ::-1]))


def test_heavy_requests_leave_the_event_loop():
    rules, settings = get_family("qwen3-vl").rules, Settings(inline_tokens=1000)
    assert token_caps.weigh([mrope.Text(999), mrope.Video(grid=(4, 2, 2))], rules).light(settings) is False
    assert token_caps.weigh([mrope.Text(900), mrope.Video(grid=(4, 2, 2))], rules).light(settings) is True
    # a tiny grid with many temporal patches is heavy under timestamp rules: one block per patch
    assert (
        token_caps.weigh([mrope.Video(grid=(token_caps.INLINE_PATCHES + 1, 2, 2))], rules).light(Settings())
        is False
    )


@pytest.mark.parametrize(
    ("body", "extra"),
    [
        (
            {
                "model": "qwen2.5-vl",
                "segments": [{"type": "text", "tokens": 3}, {"type": "image", "grid": [1, 4, 4]}],
            },
            None,
        ),
        # Qwen3-Omni: fractional positions and delta, and the audio clips' token counts
        (
            {
                "model": "qwen3-omni",
                "segments": [
                    {"type": "text", "tokens": 2},
                    {"type": "video", "grid": [2, 4, 4], "second_per_grid": 0.5, "audio": {"tokens": 3}},
                    {"type": "audio", "tokens": 5},
                ],
                "rules": {"time_rounding": "none"},
            },
            "audio_tokens",
        ),
    ],
)
def test_positions_response_matches_its_documented_model(client, body, extra):
    """The OpenAPI response model (service.models.PositionsResponse) accepts what the endpoint sends,
    field for field (so a client generated from /openapi.json can read every answer)."""
    from mrope.service._wire import PositionsResponse

    resp = client.post("/v1/positions", json=body)
    assert resp.status_code == 200, resp.text
    sent = resp.json()
    assert set(sent) <= set(PositionsResponse.model_fields)
    assert PositionsResponse.model_validate(sent).model_dump(exclude_none=True).keys() == sent.keys()
    if extra:
        assert sent[extra]
        assert any(x != int(x) for row in sent["positions"] for x in row)  # fractional time kept
