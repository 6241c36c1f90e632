"""``layer_sets`` on ``POST /v1/positions``: every position set of a model (or of the request's own) and the
layer pattern, in the JSON form and the npy form (docs/service.md).

Expected values: each set equals :func:`mrope.build_position_sets` of the same segments, and for
``circle-rope-age`` the authors' code as tests/models/test_scheme_circle.py writes it out
(lose4578/CircleRoPE at 063fb2c, ``get_rope_index`` with and without ``use_m_index``,
``code/modular_qwen2_5_vl_circle_rope.py:310-329``; imported from there, not copied). The npy bytes are
numpy's own ``np.save`` of those values. The 4xx paths and the token cap over several sets run against
real server processes (test_service_value_bounds.py, test_service_sizes.py).
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image as PILImage

import mrope
from mrope.models import get_family
from mrope.service import Settings
from mrope.service.app import create_app

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from test_scheme_circle import _prompt, _reference, assert_close_positions, segment_json  # noqa: E402

NPY = "application/x-npy"


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(Settings())) as c:
        yield c


def ask(client, segs, model="circle-rope-age", layer_sets=True, accept=None):
    body = {"model": model, "segments": [segment_json(s) for s in segs], "layer_sets": layer_sets}
    headers = {"accept": accept} if accept else {}
    resp = client.post("/v1/positions", json=body, headers=headers)
    assert resp.status_code == 200, resp.text
    return resp


@pytest.mark.parametrize("seed", range(4))
def test_age_sets_equal_the_library_and_the_authors_code(client, seed) -> None:
    """JSON: each set's positions and fields equal build_position_sets', the circle set the authors'
    circle index and the mrope set their M-RoPE index; the pattern is strategy 4's (circle, mrope)."""
    segs = _prompt(seed)
    want = mrope.build_position_sets(segs, model="circle-rope-age")
    data = ask(client, segs).json()
    assert list(data["position_sets"]) == ["circle", "mrope"] and data["layer_pattern"] == ["circle", "mrope"]
    for name, p in want.items():
        got = dict(data["position_sets"][name])
        np.testing.assert_array_equal(np.asarray(got.pop("positions"), dtype=p.ids.dtype), p.ids)
        assert got == json.loads(json.dumps(p.metadata()))
    circle, circle_delta = _reference(want["circle"])
    m, m_delta = _reference(want["circle"], use_m_index=True)
    served = {k: np.asarray(v["positions"]) for k, v in data["position_sets"].items()}
    assert_close_positions(served["circle"].astype(np.float32), circle)
    np.testing.assert_array_equal(served["mrope"], m.numpy())
    assert data["position_sets"]["circle"]["delta"] == pytest.approx(circle_delta, abs=1e-4)
    assert data["position_sets"]["mrope"]["delta"] == m_delta
    assert data["media"] == [None] * sum(not isinstance(s, mrope.Text) for s in segs)
    # negative control: the sets differ, so a swap of their names would fail the checks above
    assert not np.allclose(served["circle"], m.numpy().astype(np.float64), atol=1e-3)


def test_age_sets_as_npy(client) -> None:
    """npy: the sets stacked [2, 3, T] in their order as float64 (a float32 set with an int64 one: both
    exact), exactly np.save of the library's values; names, pattern and deltas in headers."""
    segs = _prompt(1)
    want = mrope.build_position_sets(segs, model="circle-rope-age")
    resp = ask(client, segs, accept=NPY)
    expected = np.stack([want["circle"].ids.astype(np.float64), want["mrope"].ids.astype(np.float64)])
    buf = io.BytesIO()
    np.save(buf, expected, allow_pickle=False)
    assert resp.content == buf.getvalue()
    assert json.loads(resp.headers["x-mrope-position-sets"]) == ["circle", "mrope"]
    assert json.loads(resp.headers["x-mrope-layer-pattern"]) == ["circle", "mrope"]
    deltas = json.loads(resp.headers["x-mrope-deltas"])
    assert deltas == [float(want["circle"].delta), int(want["mrope"].delta)]
    assert int(resp.headers["x-mrope-num-tokens"]) == want["circle"].num_tokens
    spans = json.loads(resp.headers["x-mrope-spans"])
    assert spans == [[s.to_dict() for s in p.spans] for p in want.values()]
    loaded = np.load(io.BytesIO(resp.content))
    m, _ = _reference(want["circle"], use_m_index=True)
    np.testing.assert_array_equal(loaded[1], m.numpy())  # the authors' M-RoPE set, through the wire
    assert not np.array_equal(loaded[0], loaded[1])  # negative control


def test_a_requests_own_sets_on_any_model(client) -> None:
    """``{"sets", "pattern"}`` lays out sets of the request's own on qwen2-vl (after its rules): each
    equals build_position_sets of the family with those sets; both integer, so npy is int32."""
    own = {"sets": {"offset": {}, "reset": {"spatial": "reset"}}, "pattern": ["offset", "reset", "nope"]}
    segs = [mrope.Text(3), mrope.Image(grid=(1, 4, 6)), mrope.Text(2), mrope.Image(grid=(1, 8, 4))]
    family = get_family("qwen2-vl").replace(layer_sets=mrope.LayerSets(own["sets"], tuple(own["pattern"])))
    want = mrope.build_position_sets(segs, model=family)
    data = ask(client, segs, "qwen2-vl", own).json()
    assert data["layer_pattern"] == own["pattern"]
    for name, p in want.items():
        np.testing.assert_array_equal(np.asarray(data["position_sets"][name]["positions"]), p.ids)
    loaded = np.load(io.BytesIO(ask(client, segs, "qwen2-vl", own, accept=NPY).content))
    assert loaded.dtype == np.int32
    np.testing.assert_array_equal(loaded, np.stack([p.ids for p in want.values()]))
    # the reset set is Qwen2-VL's layout with h and w from 0 at each image (negative control: not offset)
    assert data["position_sets"]["reset"]["positions"] != data["position_sets"]["offset"]["positions"]
    image = next(s for s in want["reset"].spans if s.kind == "image")
    assert int(want["reset"].ids[1, image.start : image.stop].min()) == 0


def test_without_layer_sets_the_answer_is_one_set(client) -> None:
    """``layer_sets`` absent or false: the plain answer (the scheme's own positions, the circle set)."""
    segs = _prompt(0)
    for value in (None, False):
        data = ask(client, segs, layer_sets=value).json()
        assert "position_sets" not in data
        want = mrope.build_positions(segs, model="circle-rope-age").ids
        np.testing.assert_array_equal(np.asarray(data["positions"], dtype=want.dtype), want)


def test_the_sets_answer_matches_its_documented_model(client) -> None:
    """The OpenAPI answer of /v1/positions is PositionsResponse or PositionSetsResponse; a sets answer
    is read by the second field for field (a client generated from /openapi.json reads it), and not by
    the first (the control: the two forms are told apart)."""
    from pydantic import ValidationError

    from mrope.service._wire import PositionSetsResponse, PositionsResponse

    sent = ask(client, _prompt(3)).json()
    assert PositionSetsResponse.model_validate(sent).model_dump(exclude_none=True) == sent
    with pytest.raises(ValidationError):
        PositionsResponse.model_validate(sent)
    schema = client.get("/openapi.json").json()["paths"]["/v1/positions"]["post"]["responses"]["200"]
    refs = [b["$ref"] for b in schema["content"]["application/json"]["schema"]["anyOf"]]
    assert refs == ["#/components/schemas/PositionsResponse", "#/components/schemas/PositionSetsResponse"]


# ------------------------------------------------------------------------------------------ upload


def png_bytes(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    PILImage.new("RGB", (width, height), (90, 30, 160)).save(buf, format="PNG")
    return buf.getvalue()


def upload(client, images: list[bytes], layer_sets, model="circle-rope-age", accept=None):
    layout = [{"type": "text", "tokens": 3}]
    for k in range(len(images)):
        layout += [{"type": "file", "index": k}, {"type": "text", "tokens": 2}]
    data = {"model": model, "layout": json.dumps(layout), "layer_sets": json.dumps(layer_sets)}
    files = [("files", (f"{k}.png", io.BytesIO(b))) for k, b in enumerate(images)]
    return client.post(
        "/v1/positions/upload", data=data, files=files, headers={"accept": accept} if accept else {}
    )


def uploaded_segments(files: list[dict]) -> list[mrope.Segment]:
    """The upload's layout as library segments, each image by the grid the service read from its file."""
    segs: list[mrope.Segment] = [mrope.Text(3)]
    for f in files:
        segs += [mrope.Image(grid=tuple(f["grid"])), mrope.Text(2)]
    return segs


def test_an_upload_answers_every_set(client) -> None:
    """``layer_sets`` on the upload: JSON, each set equal to build_position_sets of the files' grids, the
    circle set the authors' circle index and the mrope set their M-RoPE index, with the files read; npy,
    the sets stacked as np.save writes them, the files in their header."""
    resp = upload(client, [png_bytes(112, 84), png_bytes(56, 140)], True)
    assert resp.status_code == 200, resp.text
    data = resp.json()
    assert [f["grid"] for f in data["files"]] == [[1, 6, 8], [1, 10, 4]]  # 14-px patches of the resize
    want = mrope.build_position_sets(uploaded_segments(data["files"]), model="circle-rope-age")
    assert list(data["position_sets"]) == ["circle", "mrope"] and data["layer_pattern"] == ["circle", "mrope"]
    for name, p in want.items():
        np.testing.assert_array_equal(
            np.asarray(data["position_sets"][name]["positions"], p.ids.dtype), p.ids
        )
    circle, _ = _reference(want["circle"])
    m, _ = _reference(want["circle"], use_m_index=True)
    assert_close_positions(np.asarray(data["position_sets"]["circle"]["positions"], np.float32), circle)
    np.testing.assert_array_equal(np.asarray(data["position_sets"]["mrope"]["positions"]), m.numpy())
    assert not np.allclose(circle.numpy(), m.numpy(), atol=1e-3)  # negative control: the sets differ
    from mrope.service._wire import UploadSetsResponse

    assert UploadSetsResponse.model_validate(data).model_dump(exclude_none=True) == data
    npy = upload(client, [png_bytes(112, 84), png_bytes(56, 140)], True, accept=NPY)
    buf = io.BytesIO()
    np.save(buf, np.stack([p.ids.astype(np.float64) for p in want.values()]), allow_pickle=False)
    assert npy.content == buf.getvalue()
    assert json.loads(npy.headers["x-mrope-files"]) == data["files"]
    plain = upload(client, [png_bytes(112, 84)], False).json()  # the control: no sets, one answer
    assert "position_sets" not in plain and plain["files"][0]["grid"] == [1, 6, 8]


@pytest.mark.parametrize(
    ("layer_sets", "says"),
    [
        (None, "layer_sets"),
        ({"sets": {"a": {}}}, "'sets' and 'pattern' together"),
        ({"sets": {"a": {"no_such_rule": 1}}, "pattern": ["a"]}, "no_such_rule"),
        ({"sets": {"a": {}}, "pattern": ["b"]}, "['b']"),
        ("circle", "layer_sets is true or an object"),
    ],
)
def test_an_uploads_bad_layer_sets_is_a_422(client, layer_sets, says) -> None:
    resp = upload(client, [png_bytes(56, 56)], layer_sets)
    assert resp.status_code == 422, resp.text
    assert says in resp.json()["error"]["message"], resp.json()
    assert upload(client, [png_bytes(56, 56)], {"sets": {"a": {}}, "pattern": ["a"]}).status_code == 200


# -------------------------------------------------------------------------------------- rope index


def test_rope_index_answers_every_set_of_a_padded_batch(client) -> None:
    """``layer_sets`` on /v1/rope-index (the batch form): each row of each set, up to its length, equals
    that prompt's set of build_position_sets (the builder, another path than the token ids), the mrope
    set the authors' index; deltas per row; npy the sets stacked [2, 3, B, L] as np.save writes them."""
    seeds = range(4)
    want = [mrope.build_position_sets(_prompt(s), model="circle-rope-age") for s in seeds]
    length = max(w["circle"].num_tokens for w in want)
    ids = [w["circle"].input_ids.tolist() + [0] * (length - w["circle"].num_tokens) for w in want]
    mask = [[1] * w["circle"].num_tokens + [0] * (length - w["circle"].num_tokens) for w in want]
    body = {
        "model": "circle-rope-age",
        "input_ids": ids,
        "attention_mask": mask,
        "image_grid_thw": np.concatenate([w["circle"].image_grid_thw for w in want]).tolist(),
        "video_grid_thw": np.concatenate([w["circle"].video_grid_thw for w in want]).reshape(-1, 3).tolist(),
        "second_per_grid_ts": np.concatenate([w["circle"].second_per_grid_ts for w in want]).tolist(),
        "layer_sets": True,
    }
    resp = client.post("/v1/rope-index", json=body)
    assert resp.status_code == 200, resp.text
    data = resp.json()
    assert data["layer_pattern"] == ["circle", "mrope"] and list(data["position_sets"]) == ["circle", "mrope"]
    for name in ("circle", "mrope"):
        got = np.asarray(data["position_sets"][name]["position_ids"])
        for b, w in enumerate(want):
            n = w[name].num_tokens
            np.testing.assert_array_equal(got[:, b, :n].astype(w[name].ids.dtype), w[name].ids)
        assert data["position_sets"][name]["deltas"] == pytest.approx(
            [float(w[name].delta) for w in want], abs=1e-4
        )
    for b, w in enumerate(want):
        m, _ = _reference(w["circle"], use_m_index=True)
        n = w["circle"].num_tokens
        np.testing.assert_array_equal(
            np.asarray(data["position_sets"]["mrope"]["position_ids"])[:, b, :n], m.numpy()
        )
    circle = np.asarray(data["position_sets"]["circle"]["position_ids"])
    assert not np.allclose(circle, data["position_sets"]["mrope"]["position_ids"], atol=1e-3)  # control
    npy = client.post("/v1/rope-index", json=body, headers={"accept": NPY})
    loaded = np.load(io.BytesIO(npy.content))
    assert loaded.dtype == np.float64 and loaded.shape == (2, 3, len(want), length)
    for k, name in enumerate(("circle", "mrope")):
        for b, w in enumerate(want):
            np.testing.assert_array_equal(
                loaded[k, :, b, : w[name].num_tokens], w[name].ids.astype(np.float64)
            )
    assert json.loads(npy.headers["x-mrope-position-sets"]) == ["circle", "mrope"]
    plain = client.post("/v1/rope-index", json={**body, "layer_sets": False}).json()
    assert "position_sets" not in plain and len(plain["deltas"]) == len(want)  # the control: one set


@pytest.mark.parametrize(
    ("layer_sets", "status", "says"),
    [
        ({"sets": {"a": {}}}, 422, "'sets' and 'pattern' together"),
        ({"sets": {"a": {"spatail": "reset"}}, "pattern": ["a"]}, 422, "spatail"),
        ("all", 422, "layer_sets is true or an object"),
    ],
)
def test_rope_index_refuses_bad_layer_sets(client, layer_sets, status, says) -> None:
    body = {"model": "qwen2-vl", "input_ids": [[1, 2, 3]], "layer_sets": layer_sets}
    resp = client.post("/v1/rope-index", json=body)
    assert resp.status_code == status and says in resp.json()["error"]["message"], resp.text
    program = client.post(
        "/v1/rope-index", json={**body, "layer_sets": True}, headers={"accept": "application/x-mrope-program"}
    )
    assert program.status_code == 406
    assert client.post("/v1/rope-index", json={**body, "layer_sets": True}).status_code == 200  # control
