"""Frame sampling without torch: the float32 linspace equals ``torch.linspace`` bit for bit.

Expected values come from torch itself (``torch.linspace(..., dtype=torch.float32)``, what
qwen-vl-utils calls), on a spread of frame counts and sample counts, including the long videos where
float32 and float64 disagree.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import torch

from mrope.media._sampling import linspace_float32, sample_frame_indices


def cases() -> list[tuple[int, int]]:
    rng = np.random.default_rng(12)
    out = []
    for total in [*range(2, 60), *(int(x) for x in rng.integers(60, 400_000, 60))]:
        for n in {2, 4, 6, 8, 16, 30, 64, 100, 768, total, max(2, total // 2), max(2, total - 1)}:
            if 2 <= n <= total:
                out.append((total, n))
    return out


def test_linspace_float32_equals_torch():
    checked = 0
    for total, n in cases():
        want = torch.linspace(0, total - 1, n, dtype=torch.float32).numpy()
        got = linspace_float32(total - 1, n)
        assert got.dtype == np.float32
        assert np.array_equal(got, want), (total, n)
        idx = torch.linspace(0, total - 1, n, dtype=torch.float32).round().long().numpy()
        assert np.array_equal(np.round(got).astype(np.int64), idx), (total, n)
        checked += 1
    assert checked > 700
    # float64 gives other indices here: the float32 semantics are the ones kept
    f64 = np.round(np.linspace(0, 99_999, 768)).astype(np.int64)
    f32 = torch.linspace(0, 99_999, 768, dtype=torch.float32).round().long().numpy()
    assert not np.array_equal(f64, f32)
    assert np.array_equal(sample_frame_indices(100_000, 30.0, nframes=768), f32)


def test_sampling_imports_no_torch():
    code = (
        "import sys; from mrope.media import load_video; from mrope.media._sampling import sample_frame_indices;"
        "print(sample_frame_indices(100000, 30.0, nframes=64).tolist()[-3:]);"
        "print('torch' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    want = torch.linspace(0, 99_999, 64, dtype=torch.float32).round().long().tolist()[-3:]
    assert lines[0] == str(want) and lines[1] == "False", out.stdout
    assert sample_frame_indices(100000, 30.0, nframes=64).tolist()[-3:] == want
