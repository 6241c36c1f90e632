"""The apply-op benchmark scripts still run: gpu_check.py refuses to run without CUDA (its ``--dry-run``
sections: test_gpu_check_kernel.py, test_gpu_check_models.py, test_gpu_check_variants.py, three files so
that two workers run them at once); bench_apply.py and bench_videogen.py run at a tiny size."""

from __future__ import annotations

from support.scripts import run_script


def test_gpu_check_needs_cuda() -> None:
    out = run_script(["benchmarks/gpu_check.py"], CUDA_VISIBLE_DEVICES="")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "needs CUDA" in out.stderr


def test_bench_apply_runs() -> None:
    out = run_script(["benchmarks/bench_apply.py", "--tokens", "256", "--repeat", "1"])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "| transformers |" in out.stdout and "| mrope |" in out.stdout
    assert "| 1,000,000 |" in out.stdout
    assert "| plain torch bf16, cos/sin cache gather |" in out.stdout
    assert "| mrope bf16 (fp32 compute, one rounding) |" in out.stdout


def test_bench_videogen_runs() -> None:
    out = run_script(["benchmarks/bench_videogen.py", "--frames", "1", "--repeat", "1", "--threads", "1"])
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith("| ") and "x |" in line]
    assert [row.split(" | ")[0] for row in rows] == [
        "| wan",
        "| hunyuan-video",
        "| cogvideox",
        "| omnigen2",
    ], out.stdout
