"""Benchmark: Falcon-OCR's golden-gate rotation through the pair table against TII's own, on CPU.

Falcon-OCR's attention shape (16 query heads, 8 key heads repeated to 16 as its model does, head_dim 64) over
one image of ``--grid`` patches plus 40 text tokens, q and k ``[1, S, H, D]``:

- TII: falcon-perception 1.0.0's ``apply_3d_rotary_emb`` with its tables (``precompute_freqs_cis`` indexed by
  ``pos_t``, ``apply_golden_freqs_cis_to_visual_pos``), as written out in
  ``tests/ops/test_ops_golden_gate.py`` (``ref_apply``: the package needs einops, which mrope does not);
- mrope: ``golden_gate_positions`` + ``apply_mrope(q, k, rows, golden_gate_table(freqs), backend="torch")``
  (``layout="bshd"``), positions from the image-step engine.

Prints medians (round-robin timing, ``benchmarks/_timing.py``), the ratio TII / mrope (above 1: mrope is
faster), the largest output difference, and the load average.

Run: ``python benchmarks/bench_golden_gate.py`` (``--repeat 5`` for a quick run).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

import mrope
from mrope.ops import apply_mrope, golden_gate_positions, golden_gate_table

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path[:0] = [os.path.join(HERE, "..", "tests", "ops"), os.path.join(HERE, "..", "tests", "layout")]
from _timing import compare  # noqa: E402
from test_image_step import RULES  # noqa: E402  (Falcon-OCR's rules, written once)
from test_ops_golden_gate import ref_apply  # noqa: E402  (TII's rope.py, written out once)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", type=int, nargs=2, default=(48, 64), help="image patches (h, w)")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    hh, ww = args.grid
    segments = [mrope.Text(8), mrope.Image(grid=(1, hh, ww)), mrope.Text(32)]
    positions = mrope.build_positions(segments, rules=RULES).torch()  # [3, S] float32
    s = positions.shape[1]
    g = torch.Generator().manual_seed(0)
    freqs = torch.randn(16, 16, 2, generator=g) * torch.logspace(0, -3, 16)[None, :, None]
    q = torch.randn(1, s, 16, 64, generator=g)
    k = torch.randn(1, s, 8, 64, generator=g).repeat_interleave(2, dim=2)
    pos_t, pos_hw = positions[0].long()[None], positions[1:].T[None].contiguous()
    table = golden_gate_table(freqs)

    def tii() -> object:
        return ref_apply(q, k, pos_t, pos_hw, freqs, 10000.0)

    def ours() -> object:
        rows = golden_gate_positions(positions[:, None], freqs)  # [1 + H F, 1, S]
        return apply_mrope(q, k, rows, table, layout="bshd", backend="torch")

    diff = max((a - b).abs().max().item() for a, b in zip(tii(), ours(), strict=True))
    times = compare({"tii": tii, "mrope": ours}, repeat=args.repeat)
    load = os.getloadavg()[0]
    print(f"S = {s} tokens ({hh}x{ww} image), fp32, {args.threads} thread(s), load {load:.1f}")
    print(
        f"TII {times['tii'] * 1e3:.2f} ms, mrope {times['mrope'] * 1e3:.2f} ms, "
        f"TII / mrope {times['tii'] / times['mrope']:.2f}x, max |diff| {diff:.2e}"
    )


if __name__ == "__main__":
    main()
