"""``mrope compare`` prints what mrope.testing.compare_schemes measures (table, JSON, decay PNG), and
``mrope plot`` draws any research scheme's layout."""

from __future__ import annotations

import json

import pytest
from PIL import Image as PILImage

from mrope._cli import main
from mrope.models import SCHEME_NAMES
from mrope.testing import compare_schemes

SIZES = ("--video-frames", "3", "--decay-extent", "4")


def run(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_and_table_are_the_librarys(capsys, tmp_path) -> None:
    """--json prints compare_schemes' own document (same models, rules, sizes); the table is its table;
    --png draws the decay curves."""
    want = compare_schemes(["videorope", "qwen2-vl"], rules={"crop": "keep"}, video_frames=3, decay_extent=4)
    code, out, err = run(
        capsys, "compare", "videorope", "Qwen/Qwen2-VL-7B-Instruct", "--rule", "crop=keep", *SIZES, "--json"
    )
    assert (code, err) == (0, "")
    assert json.loads(out) == json.loads(want.to_json())
    png = tmp_path / "decay.png"
    code, out, _ = run(
        capsys, "compare", "videorope", "qwen2-vl", "--rule", "crop=keep", *SIZES, "--png", png
    )
    assert code == 0 and out.strip() == want.table()
    with PILImage.open(png) as img:
        assert img.width == 1200


def test_bad_input_is_one_line_and_exit_2(capsys) -> None:
    code, _, err = run(capsys, "compare", "no-such-scheme", *SIZES)
    assert code == 2 and "unknown model 'no-such-scheme'" in err and "videorope" in err
    code, _, err = run(capsys, "compare", "videorope", "--png", "decay.jpg")
    assert code == 2 and "must end in .png" in err
    code, _, err = run(capsys, "compare", "videorope", "--decay-extent", "0")
    assert code == 2 and "--decay-extent must be an int >= 1" in err


FOUR_ROW_SCHEMES = ("vrope",)
"""Schemes whose positions have more than the three rows t, h and w the picture draws."""


@pytest.mark.parametrize("name", [n for n in SCHEME_NAMES if n not in FOUR_ROW_SCHEMES])
def test_plot_draws_every_scheme(name, capsys, tmp_path) -> None:
    """``mrope plot --model <scheme>`` writes the layout picture of the scheme's positions."""
    png = tmp_path / "layout.png"
    code, out, err = run(
        capsys, "plot", "--model", name, "--text", "3", "--image-grid", "1,8,8", "--text", "2", "--png", png
    )
    assert (code, err) == (0, "") and "23 tokens" in out
    with PILImage.open(png) as img:
        assert img.width == 1200


@pytest.mark.parametrize("name", FOUR_ROW_SCHEMES)
def test_plot_refuses_a_scheme_of_four_rows(name, capsys, tmp_path) -> None:
    """The picture draws t, h and w; a scheme writing four rows is refused with the row count (exit 2)."""
    code, _, err = run(
        capsys, "plot", "--model", name, "--text", "3", "--image-grid", "1,8,8", "--png", tmp_path / "x.png"
    )
    assert code == 2 and "4 rows" in err
    assert not (tmp_path / "x.png").exists()
