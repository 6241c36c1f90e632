"""Fuzzing: schemathesis requests generated from the service's own OpenAPI schema (valid and invalid),
and hypothesis-generated valid segment lists whose answers must equal the library's.

Zero 5xx is the bar: every response is a 2xx or a 4xx in the error shape.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image as PILImage
from schemathesis.checks import positive_data_acceptance

import mrope
from mrope.media import image_grid
from mrope.models import PRESET_NAMES, get_family
from mrope.service import Settings
from mrope.service.app import create_app

# small caps keep every generated request cheap; they are part of what is fuzzed
APP = create_app(
    Settings(max_tokens=200_000, max_segments=256, max_body_bytes=1 << 20, max_upload_bytes=1 << 20)
)
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
# An upload over a cap (17 files against MROPE_MAX_FILES 16) is refused by size, 413, while it streams and
# before its other fields are read; a negative example that also carries such a cap breach is rejected
# all the same, so 413 counts as a rejection of schema-violating data beside schemathesis' own list.
_rejection = schema.config.checks.negative_data_rejection
_rejection.expected_statuses = [*_rejection.expected_statuses, "413"]


@pytest.mark.timeout(120)
@schema.parametrize()
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_openapi_fuzz(case):
    """Generated from the schema. ``positive_data_acceptance`` is off: the schema cannot say that a grid's
    h must divide by the merge size, so some schema-valid requests are rightly refused (422)."""
    resp = case.call_and_validate(excluded_checks=[positive_data_acceptance])
    assert resp.status_code < 500, resp.text
    if resp.status_code >= 400:
        body = resp.json()
        assert set(body) == {"error"}, body
        assert isinstance(body["error"]["code"], str) and body["error"]["message"], body


# ------------------------------------------------------------------------- valid inputs vs the library

NON_TIMESTAMP = [m for m in PRESET_NAMES if get_family(m).rules.temporal != "timestamps"]
even = st.integers(1, 6).map(lambda k: 2 * k)
text_seg = st.one_of(
    st.builds(lambda n: {"type": "text", "tokens": n}, st.integers(0, 40)),
    st.builds(lambda ids: {"type": "text", "ids": ids}, st.lists(st.integers(0, 200_000), max_size=8)),
)
image_seg = st.one_of(
    st.builds(
        lambda h, w, wrap: {"type": "image", "grid": [1, h, w], "wrap": wrap}, even, even, st.booleans()
    ),
    st.builds(
        lambda h, w, o: {"type": "image", "grid": [1, h, w], "origin": o},
        even,
        even,
        st.lists(st.integers(0, 5), min_size=2, max_size=2),
    ),
    st.builds(
        lambda h, w: {"type": "image", "height": h, "width": w}, st.integers(1, 2000), st.integers(1, 2000)
    ),
)
video_seg = st.builds(
    lambda t, h, w, fps, wrap: {"type": "video", "grid": [t, h, w], "fps": fps, "wrap": wrap},
    st.integers(1, 6),
    even,
    even,
    st.sampled_from([0.5, 1.0, 2.0, 3.0, 4.0]),
    st.booleans(),
)
segments = st.lists(st.one_of(text_seg, image_seg, video_seg), max_size=8)


def to_library(items: list[dict], client_rules) -> list:
    out = []
    for it in items:
        kw = {k: tuple(v) if isinstance(v, list) else v for k, v in it.items() if k != "type"}
        if it["type"] == "text":
            out.append(mrope.Text(kw["tokens"] if "tokens" in kw else kw["ids"]))
        elif it["type"] == "video":
            out.append(mrope.Video(**kw))
        elif "grid" in kw:
            out.append(mrope.Image(**kw))
        else:  # the library's own sizing (checked against each processor in the family tests); this test
            # compares the service with the library, not the sizing with the processors
            out.append(mrope.Image(grid=image_grid(kw["height"], kw["width"], rules=client_rules)))
    return out


@pytest.fixture(scope="module")
def client():
    with TestClient(APP) as c:
        yield c


@pytest.mark.timeout(120)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=st.sampled_from(NON_TIMESTAMP), items=segments)
def test_valid_segments_match_library(client, model, items):
    resp = client.post("/v1/positions", json={"model": model, "segments": items})
    try:
        lib = mrope.build_positions(to_library(items, get_family(model).rules), model=model)
    except mrope.MRopeError as exc:  # e.g. a 1:300 pixel size: the service must refuse it the same way
        assert resp.status_code == 422, resp.text
        assert resp.json()["error"]["message"] == str(exc)
        return
    assert resp.status_code == 200, resp.text
    body = resp.json()
    # float32 positions (Qwen3-Omni time) travel as their shortest decimal: equal once read back as float32
    assert np.array_equal(np.asarray(body["positions"], dtype=lib.ids.dtype), lib.ids)
    delta = np.float32(body["delta"]) if lib.ids.dtype.kind == "f" else body["delta"]
    assert delta == lib.delta and body["num_tokens"] == lib.num_tokens
    assert body["spans"] == [s.to_dict() for s in lib.spans]


# ------------------------------------------------------------------------ malformed multipart bodies

_PNG = io.BytesIO()
PILImage.new("RGB", (32, 32), (9, 99, 199)).save(_PNG, format="PNG")
PIECES = [
    b"--B\r\n",
    b'Content-Disposition: form-data; name="files"; filename="a.png"\r\n',
    b'Content-Disposition: form-data; name="model"\r\n',
    b'Content-Disposition: form-data; name="layout"\r\n',
    b'Content-Disposition: form-data; name="rules"\r\n',
    b"Content-Disposition: form-data; name=files; filename*=UTF-8''%E2%82%AC\r\n",
    b"Content-Disposition: \r\n",
    b"Content-Type: image/png\r\n",
    b":\r\n",
    b"\r\n",
    _PNG.getvalue(),
    b"qwen2-vl",
    b'[{"type":"file","index":0}]',
    b'{"merge_size": 1}',
    b"--B--\r\n",
    b"\r\n--B\r\n",
    b"\x00\xff\xfe",
    b"X" * 3000,
]


@pytest.mark.timeout(120)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    parts=st.lists(st.sampled_from(PIECES), min_size=1, max_size=16),
    content_type=st.sampled_from(
        [
            "multipart/form-data; boundary=B",
            'multipart/form-data; boundary="B"',
            "multipart/form-data; boundary=",
            "multipart/form-data",
            "multipart/form-data; charset=latin-1; boundary=B",
        ]
    ),
)
def test_malformed_multipart_never_5xx(client, parts, content_type):
    resp = client.post(
        "/v1/positions/upload", content=b"".join(parts), headers={"content-type": content_type}
    )
    assert resp.status_code == 200 or 400 <= resp.status_code < 500, resp.text
    if resp.status_code != 200:
        assert resp.json()["error"]["code"]
