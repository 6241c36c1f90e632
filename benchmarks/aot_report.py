"""Compile the M-RoPE kernel ahead of time for sm_80 and sm_90 (no GPU needed) for every rotary shape the
registry holds and print ptxas' resource report (registers per thread, spill bytes).

The matrix: each distinct rotary shape of ``mrope.models.families()`` (head_dim, rotary channels, their
offset, pairing) x dtype (bf16, fp16, fp32) x angle precision (fp32, exact) x prefill (8,192 tokens) /
decode (1 token) x out of place / in place x apply / re-rotation, launched as ``mrope.ops`` launches it
(Qwen2-VL-7B's 28 q / 4 kv heads, int64 positions). Specialisations that compile to the same kernel (in
place and out of place of a full-rotary shape) are compiled once. Registers above 128 per thread halve
the resident warps of a 4-warp program on these GPUs (65536 registers per SM); spills go to local memory.

Run: ``python benchmarks/aot_report.py [--jobs N] [--all]`` (``--all`` prints every specialisation; the
default prints one row per shape and architecture). The full matrix takes minutes on two cores.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

ARCHS = (80, 90)
DTYPES = ("bfloat16", "float16", "float32")
QWEN_HEADS = {"hq": 28, "hk": 4}
REGISTER_LIMIT = 128


@dataclass(frozen=True)
class RotaryShape:
    """One rotary shape of the registry and the families that have it."""

    head_dim: int
    rotary_dim: int
    rotary_offset: int
    gptj: bool
    families: tuple[str, ...]

    @property
    def label(self) -> str:
        pairing = "gptj" if self.gptj else "neox"
        at = f" at {self.rotary_offset}" if self.rotary_offset else ""
        return f"{self.rotary_dim}{at} of {self.head_dim}, {pairing}"


def registry_shapes(families: Iterable | None = None) -> list[RotaryShape]:
    """The distinct rotary shapes of ``families`` (default: every registered family), in registry order."""
    from mrope.models import families as registered

    found: dict[tuple[int, int, int, bool], list[str]] = {}
    for fam in registered() if families is None else families:
        spec = fam.spec
        key = (spec.head_dim, spec.rotary_dim, spec.rotary_offset, spec.pairing == "gptj")
        found.setdefault(key, []).append(fam.name)
    return [RotaryShape(*key, tuple(names)) for key, names in found.items()]


def shape_variants(shape: RotaryShape) -> dict[str, object]:
    """Every specialisation of the matrix for one shape, by a name saying what it is."""
    from mrope.ops._aot import KernelVariant

    out: dict[str, object] = {}
    for dtype, exact, tokens, out_of_place, rerotate in itertools.product(
        DTYPES, (False, True), (8192, 1), (True, False), (False, True)
    ):
        name = (
            f"{dtype}, {'exact' if exact else 'fp32'} angles, {'prefill' if tokens > 1 else 'decode'}, "
            f"{'out of place' if out_of_place else 'in place'}{', rerotate' if rerotate else ''}"
        )
        out[name] = KernelVariant(
            dtype=dtype,
            exact=exact,
            rerotate=rerotate,
            head_dim=shape.head_dim,
            rotary_dim=shape.rotary_dim,
            rotary_offset=shape.rotary_offset,
            gptj=shape.gptj,
            tokens=tokens,
            out_of_place=out_of_place,
            **QWEN_HEADS,
        )
    return out


def compile_key(variant: object) -> tuple:
    """What the compiled kernel depends on: two variants with the same key compile to the same cubin."""
    from mrope.ops._aot import _signature

    signature, constexprs, num_warps = _signature(variant)  # type: ignore[arg-type]
    return tuple(sorted(signature.items())), tuple(sorted(constexprs.items())), num_warps


def _compile(job: tuple[object, int]) -> tuple[int, int, int, int, float]:
    from mrope.ops._aot import compile_variant

    variant, arch = job
    t0 = time.perf_counter()
    c = compile_variant(variant, arch)  # type: ignore[arg-type]
    return c.num_warps, c.registers, c.spill_stores, c.spill_loads, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1), help="compiler processes")
    parser.add_argument(
        "--all", action="store_true", help="print every specialisation, not one row per shape"
    )
    parser.add_argument(
        "--family", action="append", default=[], help="only the shapes of these families (repeatable)"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "0")
    import triton

    shapes = registry_shapes()
    if args.family:
        shapes = [shape for shape in shapes if set(shape.families) & set(args.family)]
    jobs: dict[tuple, tuple[object, int]] = {}  # one compile per distinct kernel and architecture
    rows = []  # (shape, variant name, arch, compile key)
    for shape in shapes:
        for name, variant in shape_variants(shape).items():
            key = compile_key(variant)
            for arch in ARCHS:
                jobs.setdefault((key, arch), (variant, arch))
                rows.append((shape, name, arch, (key, arch)))
    t0 = time.perf_counter()
    results = {}
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for done, (job, result) in enumerate(zip(jobs, pool.map(_compile, jobs.values()), strict=True), 1):
            results[job] = result
            variant, arch = jobs[job]
            print(f"[{done}/{len(jobs)}] sm_{arch} {variant}: {result[:4]}", file=sys.stderr, flush=True)
    wall = time.perf_counter() - t0
    print(
        f"# mrope kernel compiled ahead of time (triton {triton.__version__}, no GPU): {len(shapes)} rotary "
        f"shapes of the registry{' (' + ', '.join(args.family) + ')' if args.family else ''}, {len(rows) // len(ARCHS)} specialisations each on sm_80 and sm_90, "
        f"{len(jobs)} distinct compiles in {wall:.0f} s ({args.jobs} processes)\n"
    )
    if args.all:
        print("| shape | specialisation | arch | warps | registers | spill stores / loads (bytes) |")
        print("|---|---|---|---:|---:|---:|")
        for shape, name, arch, job in rows:
            warps, regs, stores, loads, _ = results[job]
            print(f"| {shape.label} | {name} | sm_{arch} | {warps} | {regs} | {stores} / {loads} |")
        print()
    print(
        "| rotary shape (families) | arch | specialisations | registers min-max | most registers in | spills |"
    )
    print("|---|---|---:|---:|---|---:|")
    worst_all, spilled = 0, 0
    for shape in shapes:
        for arch in ARCHS:
            mine = [(results[job], name) for s, name, a, job in rows if s is shape and a == arch]
            regs = [r[1] for r, _ in mine]
            (_, top, _, _, _), top_name = max(mine, key=lambda item: item[0][1])
            spills = sum(r[2] + r[3] for r, _ in mine)
            worst_all, spilled = max(worst_all, top), spilled + spills
            print(
                f"| {shape.label} ({', '.join(shape.families)}) | sm_{arch} | {len(mine)} | "
                f"{min(regs)}-{top} | {top_name} | {spills} |"
            )
    ok = worst_all <= REGISTER_LIMIT and spilled == 0
    print(
        f"\nall {len(rows)} (shape, specialisation, arch): at most {worst_all} registers per thread "
        f"(limit {REGISTER_LIMIT}), {spilled} spill bytes: {'ok' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
