"""benchmarks/bench_patch.py still runs (one family, tiny grids, one repeat); no timing is asserted."""

from __future__ import annotations

import sys
from pathlib import Path

from support.scripts import run_script

ROOT = Path(__file__).resolve().parents[2]


def test_bench_patch_runs() -> None:
    args = ["--families", "glm-4.1v", "--scale", "1", "--repeat", "1"]
    out = run_script(["benchmarks/bench_patch.py", *args], OMP_NUM_THREADS="1")
    assert out.returncode == 0, out.stdout + out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("| glm-4.1v |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4].endswith("x") and float(cells[6]) < 1e-5  # a ratio, and the logits agree


def test_bench_pipeline_checks_its_routes_agree(tmp_path: Path) -> None:
    """bench_pipeline's two routes (mrope.pipeline from headers; Qwen2-VL's own image processor, then
    transformers' get_rope_index) give equal positions on the same JPEG files before it times them."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_pipeline as bp
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    from mrope.pipeline import Preprocessor

    paths = bp.write_images(tmp_path, 3, seed=1)
    records = [
        {
            "segments": [
                {"type": "text", "tokens": bp.HEAD},
                {"type": "image", "path": str(p)},
                {"type": "text", "tokens": bp.TAIL},
            ]
        }
        for p in paths
    ]
    theirs = bp.transformers_positions(paths, *bp.hf_route())
    ours = bp.mrope_positions(records, Preprocessor(model="qwen2-vl", convention="transformers5"))
    assert [a.tolist() for a in ours] == [b.tolist() for b in theirs]
    assert len({a.shape[1] for a in ours}) == 3  # three image sizes: three token counts
