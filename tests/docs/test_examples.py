"""Every script in examples/ runs as a smoke test: a subprocess with a timeout, its output checked."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mrope

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def run_example(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    env = {**os.environ, "PYTHONWARNINGS": "ignore", **offline}
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
    )
    assert done.returncode == 0, (
        f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    )
    return done


def test_every_example_has_a_test() -> None:
    scripts = sorted(p.name for p in EXAMPLES.glob("*.py"))
    tested = {
        "quickstart.py",
        "preprocess_pipeline.py",
        "http_client.py",
        "invariance_tests.py",
        "apply_end_to_end.py",
    }
    assert set(scripts) <= tested, f"examples without a smoke test: {sorted(set(scripts) - tested)}"


@pytest.mark.timeout(60)
def test_quickstart() -> None:
    done = run_example(str(EXAMPLES / "quickstart.py"), "--model", "qwen3-vl", timeout=50)
    assert done.stdout.startswith("model qwen3-vl: ")
    assert "next decode positions:" in done.stdout


@pytest.mark.timeout(180)
@pytest.mark.parametrize("engine", ["local", "datasets", pytest.param("ray", marks=pytest.mark.slow)])
def test_preprocess_pipeline(tmp_path: Path, engine: str) -> None:
    out = tmp_path / engine
    done = run_example(
        str(EXAMPLES / "preprocess_pipeline.py"), "--out-dir", str(out), "--engine", engine, timeout=170
    )
    assert "5 samples, 1 failed" in done.stdout
    results = {r["id"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert sorted(results) == ["broken", "caption", "chat", "grids-only", "tiled-chart"]
    assert "no such file" in results["broken"]["error"]
    assert not (out / "broken.npy").exists()
    # positions saved next to the media equal the library's for the same files
    caption = mrope.build_positions(
        [mrope.Text(12), mrope.media.load_image(out / "cat.png", model="qwen2.5-vl")], model="qwen2.5-vl"
    )
    np.testing.assert_array_equal(np.load(out / "caption.npy"), caption.ids)
    assert results["caption"]["delta"] == caption.delta
    chat = np.load(out / "chat.npy")
    assert chat.shape == (3, results["chat"]["num_tokens"])
    assert results["tiled-chart"]["image_grid_thw"] == [[1, 32, 64]]
    assert results["grids-only"]["video_grid_thw"] == [[8, 28, 28]]


@pytest.mark.timeout(120)
def test_http_client_starts_and_stops_the_service() -> None:
    done = run_example(str(EXAMPLES / "http_client.py"), timeout=110)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("started the service at http://127.0.0.1:")
    assert "POST /v1/positions: service == library" in lines
    assert "POST /v1/positions/upload: service == library" in lines
    assert lines[-1] == "stopped the service"


@pytest.mark.timeout(180)
def test_invariance_tests_run_under_pytest() -> None:
    done = run_example(
        "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLES / "invariance_tests.py"), timeout=170
    )
    assert "10 passed" in done.stdout


@pytest.mark.timeout(120)
def test_apply_end_to_end_matches_the_float64_reference() -> None:
    done = run_example(str(EXAMPLES / "apply_end_to_end.py"), timeout=110)
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("all presets match the float64 reference")
    errors = [float(line.split("= ")[1].split()[0]) for line in lines[:-1]]
    assert len(errors) == 4 and max(errors) < 5e-5


def test_the_reference_of_apply_end_to_end_is_sensitive() -> None:
    """The example's reference must disagree with a wrong spec (or its check could never fail)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import apply_end_to_end as example
    finally:
        sys.path.remove(str(EXAMPLES))
    spec = mrope.models.get_family("qwen2.5-vl").spec
    p = mrope.build_positions([mrope.Text(3), mrope.Image(grid=(1, 8, 8))], model="qwen2.5-vl")
    x = np.random.default_rng(0).standard_normal((p.num_tokens, 1, spec.head_dim))
    right = example.reference(x, p.ids, spec)
    for wrong in (
        dataclasses.replace(spec, section_layout="interleaved", mrope_section=(24, 20, 20)),
        dataclasses.replace(spec, pairing="gptj"),
        dataclasses.replace(spec, theta=1e4),
    ):
        assert np.abs(example.reference(x, p.ids, wrong) - right).max() > 0.1
    text_only = mrope.text_positions(5)  # t = h = w: M-RoPE is plain RoPE, whatever the sections
    x5 = x[:5]
    a = example.reference(x5, text_only, spec)
    b = example.reference(
        x5, text_only, dataclasses.replace(spec, section_layout="interleaved", mrope_section=(24, 20, 20))
    )
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
