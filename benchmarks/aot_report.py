"""Compile the M-RoPE kernel ahead of time for sm_80 and sm_90 (no GPU needed) for every kernel shape and
specialisation the registry gives it, and print ptxas' resource report (registers per thread, spill bytes).

Kernel shapes come from the registry, not a hand list: each released family and research scheme
(``mrope.models.families()``, ``schemes()``) gives its spec's pair table (head_dim, rotary channels, their
offset, pairing, table heads) and the dtype of the positions its rules make (int64, or float32 where they
are fractional: every convention and every per-layer position set); each video-generation transformer
(``VIDEO_MODEL_NAMES``) gives its ``VideoRope``'s table and its latent positions' dtype (int64, float64 for
CogVideoX 1.0's crop coordinates). Heads are the launch's: Qwen2-VL-7B's 28 q / 4 kv for a shared table,
rounded up to multiples of a per-head table's heads (MHRoPE's 8: 32 / 8), and a video transformer's default
``num_attention_heads`` for both q and k (diffusers' self-attention has no GQA; OmniGen2's has: 24 q / 8 kv).

Each shape gets every specialisation the op launches (``specialisations``): each q / k dtype the op takes
(``mrope.ops._dispatch.DTYPES``) x angle precision (fp32, exact) x prefill (8,192 tokens) / decode (1 token)
x launch: apply out of place, in place, and its backward (``CONJ``), for q and k together and for q or k
alone (autograd's in-place rotation takes one tensor a call), and the re-rotation of keys out of place and
in place. Specialisations that compile to the same kernel are compiled once. Registers above 128 per
thread halve the resident warps of a 4-warp program on these GPUs (65536 registers per SM); spills go to
local memory. ``SWITCHES`` says which of these sets each compile-time switch of the kernel.

Run: ``python benchmarks/aot_report.py [--jobs N] [--all] [--family NAME ...] [--results FILE]``
(``--family`` keeps the shapes of those families / schemes / video models; ``--results`` keeps each
compile's report in a JSON-lines file and reuses it, so a long matrix runs in pieces; ``--all`` prints
every specialisation; ``--no-compile`` prints the tables of what ``--results`` holds). The whole matrix took
about 70 minutes with 2 processes on a loaded 2-core machine (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

ARCHS = (80, 90)
QWEN_HEADS = (28, 4)
"""q and kv heads of Qwen2-VL-7B (config.json: num_attention_heads 28, num_key_value_heads 4)."""
LEARNED_HEADS = {"falcon-ocr": 16}
"""Query heads of a family whose rotation is a checkpoint tensor ``[n_heads, head_dim / 4, 2]`` (Falcon-OCR:
``ModelArgs.n_heads`` 16, falcon_perception/__init__.py:37, kept by ``get_model_args("ocr")`` :83-84)."""
VIDEO_HEADS = {"wan": (40, 40), "hunyuan-video": (24, 24), "cogvideox": (30, 30), "omnigen2": (24, 8)}
"""q and kv heads of each video transformer's default config (diffusers 0.42.1: transformer_wan.py:575,
transformer_hunyuan_video.py:908, cogvideox_transformer_3d.py:223; OmniGen2 at 0f72fa9:
transformer_omnigen2.py:265-266), as ``video_rope`` reads defaults."""
VIDEO_CONFIGS: dict[str, tuple[dict[str, Any], ...]] = {
    "wan": ({},),
    "hunyuan-video": ({},),
    # 1.0 (float crop coordinates) and 1.5 (patch_size_t set: integer counts), cogvideox_transformer_3d.py:224-248
    "cogvideox": (
        {"use_rotary_positional_embeddings": True},
        {"use_rotary_positional_embeddings": True, "patch_size_t": 2},
    ),
    "omnigen2": ({},),
}
"""The config(s) each video transformer is read from: its defaults, plus what turns its rotary on."""
TOKENS = {"prefill": 8192, "decode": 1}
REGISTER_LIMIT = 128
SWITCHES = {
    "F": "shape (rotary channels)",
    "D_PASS": "shape (head_dim - rotary channels)",
    "ROT_OFF": "shape (rotary offset)",
    "GPTJ": "shape (pairing)",
    "PER_HEAD": "shape (table heads)",
    "BLOCK_T": "launch config (tokens, heads, frequencies, dtype, table heads)",
    "BLOCK_HQ": "launch config",
    "BLOCK_HK": "launch config",
    "BLOCK_F": "launch config",
    "BLOCK_P": "launch config",
    "EXACT": "angle precision",
    "CONJ": "launch (backward)",
    "COPY_PASS": "launch (out of place) and shape (pass-through channels)",
    "F64": "dtype",
    "POS_KIND": "shape (positions' dtype)",
    "POS2_KIND": "shape (positions' dtype; re-rotation)",
    "REROTATE": "launch (re-rotation)",
    "RNE_BF16": "interpreter only (False when compiled)",
}
"""Each ``tl.constexpr`` parameter of the kernel and what in this report sets it (a test checks this
covers the kernel's signature)."""


@dataclass(frozen=True)
class KernelShape:
    """One kernel shape: what a family / scheme / video model fixes for every call, and who has it."""

    head_dim: int
    rotary_dim: int
    rotary_offset: int
    gptj: bool
    table_heads: int
    hq: int
    hk: int
    position_dtype: str
    sources: tuple[str, ...]

    @property
    def key(self) -> tuple:
        return (self.head_dim, self.rotary_dim, self.rotary_offset, self.gptj, self.table_heads, self.hq,
                self.hk, self.position_dtype)  # fmt: skip

    @property
    def label(self) -> str:
        pairing = "gptj" if self.gptj else "neox"
        at = f" at {self.rotary_offset}" if self.rotary_offset else ""
        table = f", {self.table_heads} table heads" if self.table_heads > 1 else ""
        pos = "" if self.position_dtype == "int64" else f", {self.position_dtype} positions"
        return f"{self.rotary_dim}{at} of {self.head_dim}, {pairing}{table}, {self.hq}/{self.hk} heads{pos}"


def _heads(table_heads: int) -> tuple[int, int]:
    """Qwen2-VL-7B's heads, each rounded up to a multiple of ``table_heads`` (a per-head table's heads
    divide q's and k's)."""
    return tuple(-(-h // table_heads) * table_heads for h in QWEN_HEADS)  # type: ignore[return-value]


def family_launches(fam: Any) -> Iterator[tuple[Any, tuple[int, int], str]]:
    """``(pair table, (hq, hk), positions' dtype)`` of a family or scheme: its spec's table, and the
    dtype of the positions of each convention and each of its per-layer position sets."""
    from mrope._grid import position_dtype
    from mrope.models import CONVENTIONS
    from mrope.ops._pairs import pair_table

    if fam.learned_rotary is not None:  # the op rotates by the checkpoint tensor's table, never the spec's
        yield from _learned_launches(fam)
        return
    table = pair_table(fam.spec)
    dtypes = {
        str(position_dtype(fam.rules_for(conv).replace(**overrides)))
        for conv in CONVENTIONS
        for overrides in fam.layer_sets.sets.values()
    }
    for dtype in sorted(dtypes):
        yield table, _heads(table.heads), dtype


def _learned_launches(fam: Any) -> Iterator[tuple[Any, tuple[int, int], str]]:
    """A learned rotary's launch: :func:`mrope.ops.golden_gate_table` of a released-shape tensor (values do
    not change the kernel), one table head per query head, key heads repeated to the query's (the model's
    ``repeat_kv`` before rotating), float32 rows (:func:`mrope.ops.golden_gate_positions`)."""
    import numpy as np

    from mrope.ops import golden_gate_table

    heads = LEARNED_HEADS[fam.name]
    table = golden_gate_table(np.zeros((heads, fam.spec.head_dim // 4, 2)), theta=fam.spec.theta)
    yield table, (heads, heads), "float32"


def video_launches(name: str) -> Iterator[tuple[Any, tuple[int, int], str]]:
    """``(pair table, (hq, hk), positions' dtype)`` of a video transformer, per config it is read from."""
    from mrope import latent_positions
    from mrope.models import video_rope
    from mrope.ops._pairs import pair_table

    for config in VIDEO_CONFIGS[name]:
        rope = video_rope(config, name)
        yield pair_table(rope), VIDEO_HEADS[name], str(latent_positions(rope, *rope.patch).dtype)


def registry_shapes(sources: Iterable | None = None) -> list[KernelShape]:
    """The distinct kernel shapes of ``sources`` (families / schemes, or video model names; default:
    every family, scheme and video model of the registry), in registry order."""
    from mrope.models import VIDEO_MODEL_NAMES, families, schemes

    if sources is None:
        sources = (*families(), *schemes(), *VIDEO_MODEL_NAMES)
    found: dict[tuple, list[str]] = {}
    for source in sources:
        named = isinstance(source, str)
        for table, (hq, hk), pos in video_launches(source) if named else family_launches(source):
            key = (table.head_dim, table.rotary_dim, table.rotary_offset, table.pairing == "gptj",
                   table.heads, hq, hk, pos)  # fmt: skip
            names = found.setdefault(key, [])
            if (name := source if named else source.name) not in names:
                names.append(name)
    return [KernelShape(*key, tuple(names)) for key, names in found.items()]


def _launches(shape: KernelShape) -> Iterator[tuple[str, dict[str, Any]]]:
    """The launches of one shape: ``(name, KernelVariant fields)``."""
    both, alone = {"hq": shape.hq, "hk": shape.hk}, {"q": (shape.hq, 0), "k": (shape.hk, 0)}
    modes = {"out of place": {}, "in place": {"out_of_place": False}, "backward": {"conj": True}}
    for mode, fields in modes.items():
        yield f"q and k, {mode}", {**both, **fields}
        for which, (hq, hk) in alone.items():
            yield f"{which} alone, {mode}", {"hq": hq, "hk": hk, **fields}
    for mode, fields in modes.items():
        if mode != "backward":  # keys alone: the variant's k heads
            yield f"rerotate, {mode}", {**both, "rerotate": True, **fields}


CORE_DTYPES = ("bfloat16", "float16", "float32")
CORE_LAUNCHES = ("q and k, out of place", "q and k, in place", "rerotate, out of place", "rerotate, in place")


def is_core(variant: Any) -> bool:
    """Whether a specialisation is in the issue-25 matrix (bf16 / fp16 / fp32, q and k together or the
    re-rotation, no backward): compiled first, and alone under ``--core``."""
    together = variant.rerotate or variant.hk > 0 or variant.hq == 0
    return variant.dtype in CORE_DTYPES and not variant.conj and together


def _priority(variant: Any) -> tuple[bool, bool, bool]:
    """Compile order: the core matrix, then fp64, then the rest, the backward (``CONJ``) last."""
    return not is_core(variant), variant.dtype != "float64", variant.conj


def specialisations(shape: KernelShape) -> dict[str, Any]:
    """Every specialisation the op launches for one shape, by a name saying what it is."""
    from mrope.ops._aot import KernelVariant
    from mrope.ops._dispatch import DTYPES

    out: dict[str, Any] = {}
    for dtype, exact, (phase, tokens), (launch, fields) in itertools.product(
        (str(d).removeprefix("torch.") for d in DTYPES), (False, True), TOKENS.items(), _launches(shape)
    ):
        name = f"{dtype}, {'exact' if exact else 'fp32'} angles, {phase}, {launch}"
        out[name] = KernelVariant(
            dtype=dtype,
            exact=exact,
            position_dtype=shape.position_dtype,
            head_dim=shape.head_dim,
            rotary_dim=shape.rotary_dim,
            rotary_offset=shape.rotary_offset,
            gptj=shape.gptj,
            tokens=tokens,
            table_heads=shape.table_heads,
            **fields,
        )
    return out


def _kernel_digest() -> str:
    from mrope.ops import _triton_kernel

    with open(_triton_kernel.__file__, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def compile_key(variant: Any) -> str:
    """What the compiled kernel depends on (the kernel source, its signature, switches and compiler
    options): two variants with the same key compile to the same cubin."""
    from mrope.ops._aot import _signature, compile_options

    signature, constexprs, num_warps = _signature(variant)
    options = compile_options(variant, num_warps)
    return repr(
        (_kernel_digest(), sorted(signature.items()), sorted(constexprs.items()), sorted(options.items()))
    )


def _compile(job: tuple[Any, int]) -> tuple[int, int, int, int, float]:
    from mrope.ops._aot import compile_variant

    variant, arch = job
    t0 = time.perf_counter()
    c = compile_variant(variant, arch)
    return c.num_warps, c.registers, c.spill_stores, c.spill_loads, time.perf_counter() - t0


def _load(path: str | None) -> dict[str, list]:
    if not path or not os.path.exists(path):
        return {}
    with open(path) as f:
        return {row["job"]: row["result"] for row in map(json.loads, f)}


def _compile_all(jobs: dict[str, tuple[Any, int]], known: dict[str, list], args: argparse.Namespace) -> float:
    """Compile the jobs not in ``known`` (adding their results to it and to ``--results``); wall seconds."""
    todo = {job: work for job, work in jobs.items() if job not in known}
    todo = dict(sorted(todo.items(), key=lambda item: _priority(item[1][0])))
    t0 = time.perf_counter()
    out = open(args.results, "a") if args.results else None  # noqa: SIM115 (closed below)
    try:
        with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = pool.map(_compile, todo.values())
            for done, (job, result) in enumerate(zip(todo, results, strict=True), 1):
                known[job] = list(result)
                if out:
                    out.write(json.dumps({"job": job, "result": list(result)}) + "\n")
                    out.flush()
                variant, arch = todo[job]
                print(f"[{done}/{len(todo)}] sm_{arch} {variant}: {result[:4]}", file=sys.stderr, flush=True)
    finally:
        if out:
            out.close()
    return time.perf_counter() - t0


def _print_tables(shapes: list[KernelShape], rows: list, results: dict[str, list], every: bool) -> bool:
    """Print the per-specialisation table (``every``) and the summary of the rows compiled so far (a
    shape's specialisations column says how many of its rows that is); whether all are compiled and
    within limits."""
    done = [row for row in rows if row[3] in results]
    if every:
        print("| shape | specialisation | arch | warps | registers | spill stores / loads (bytes) |")
        print("|---|---|---|---:|---:|---:|")
        for shape, name, arch, job in done:
            warps, regs, stores, loads, _ = results[job]
            print(f"| {shape.label} | {name} | sm_{arch} | {warps} | {regs} | {stores} / {loads} |")
        print()
    print(
        "| kernel shape (sources) | arch | specialisations | registers min-max | most registers in | spills |"
    )
    print("|---|---|---:|---:|---|---:|")
    worst_all, spilled = 0, 0
    for shape in shapes:
        for arch in ARCHS:
            mine = [(results[job], name) for s, name, a, job in done if s is shape and a == arch]
            total = sum(1 for s, _, a, _ in rows if s is shape and a == arch)
            if not mine:
                print(f"| {shape.label} ({', '.join(shape.sources)}) | sm_{arch} | 0 of {total} | | | |")
                continue
            regs = [r[1] for r, _ in mine]
            (_, top, _, _, _), top_name = max(mine, key=lambda item: item[0][1])
            spills = sum(r[2] + r[3] for r, _ in mine)
            worst_all, spilled = max(worst_all, top), spilled + spills
            print(
                f"| {shape.label} ({', '.join(shape.sources)}) | sm_{arch} | "
                f"{len(mine)}{'' if len(mine) == total else f' of {total}'} | "
                f"{min(regs)}-{top} | {top_name} | {spills} |"
            )
    ok = worst_all <= REGISTER_LIMIT and spilled == 0
    left = {job for *_, job in rows} - set(results)
    print(
        f"\n{len(done)} of {len(rows)} (shape, specialisation, arch) rows compiled ({len(left)} distinct "
        f"compiles left): at most {worst_all} registers per thread "
        f"(limit {REGISTER_LIMIT}), {spilled} spill bytes: {'ok' if ok else 'FAIL'}"
    )
    return ok and not left


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1), help="compiler processes")
    parser.add_argument(
        "--all", action="store_true", help="print every specialisation, not one row per shape"
    )
    parser.add_argument(
        "--family", action="append", default=[], help="only the shapes of these sources (repeatable)"
    )
    parser.add_argument("--results", help="JSON-lines file of compile reports to reuse and extend")
    parser.add_argument("--core", action="store_true", help="only the issue-25 matrix (see is_core)")
    parser.add_argument(
        "--no-compile", action="store_true", help="compile nothing: the tables of what --results holds"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "0")
    import triton

    shapes = registry_shapes()
    if args.family:
        shapes = [shape for shape in shapes if set(shape.sources) & set(args.family)]
    jobs: dict[str, tuple[Any, int]] = {}  # one compile per distinct kernel and architecture
    rows = []  # (shape, specialisation name, arch, job)
    for shape in shapes:
        for name, variant in specialisations(shape).items():
            if args.core and not is_core(variant):
                continue
            key = compile_key(variant)
            for arch in ARCHS:
                job = f"sm_{arch} {key}"
                jobs.setdefault(job, (variant, arch))
                rows.append((shape, name, arch, job))
    known = _load(args.results)
    cached = sum(job in known for job in jobs)
    what = f" ({', '.join(args.family)})" if args.family else ""
    print(
        f"# mrope kernel compiled ahead of time (triton {triton.__version__}, no GPU): {len(shapes)} kernel "
        f"shapes of the registry{what}, {len(rows)} (shape, specialisation, arch) rows, {len(jobs)} distinct "
        f"compiles ({cached} reused from {args.results or 'nothing'})",
        flush=True,
    )
    if not args.no_compile:
        wall = _compile_all(jobs, known, args)
        print(f"{len(jobs) - cached} compiled in {wall:.0f} s ({args.jobs} processes)")
    print()
    return 0 if _print_tables(shapes, rows, known, args.all) else 1


if __name__ == "__main__":
    sys.exit(main())
