"""Ahead-of-time compilation of the M-RoPE kernel for a CUDA architecture, without a GPU.

``triton.compile`` lowers the kernel to PTX and, with the ``ptxas`` shipped in the triton wheel, to a cubin
for any ``sm_XX``: this checks that the compiled (not interpreted) kernel builds for the GPUs it targets,
and ``ptxas``' resource report gives its registers and spills. Used by ``tests/ops/test_ops_aot.py`` and
``benchmarks/aot_report.py``.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Any

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import mrope.ops._triton_kernel as triton_kernel
import mrope.ops._triton_launch as triton_launch

_TRITON_TYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64"}


@dataclass(frozen=True)
class KernelVariant:
    """One specialisation of the kernel: what a call with these settings compiles.

    Attributes:
        dtype: q / k dtype name (``"bfloat16"``, ``"float16"``, ``"float32"``, ``"float64"``).
        exact: ``angle_precision="exact"``; rerotate: the two-position re-rotation; conj: the rotation by
            ``-angle`` (the backward of an apply, ``CONJ``).
        position_dtype: ``"int64"``, ``"float32"`` or ``"float64"``.
        head_dim, rotary_dim, rotary_offset, gptj: the spec; hq, hk, tokens: the launch shape.
        out_of_place: functional call (copies pass-through channels).
        table_heads: heads of the pair table (more than 1: a per-head table, ``PER_HEAD``).
    """

    dtype: str = "bfloat16"
    exact: bool = False
    rerotate: bool = False
    position_dtype: str = "int64"
    head_dim: int = 128
    rotary_dim: int = 128
    rotary_offset: int = 0
    gptj: bool = False
    hq: int = 28
    hk: int = 4
    tokens: int = 8192
    out_of_place: bool = True
    table_heads: int = 1
    conj: bool = False


@dataclass(frozen=True)
class CompiledVariant:
    """Result of :func:`compile_variant`: the target, the PTX size, and ptxas' resource report."""

    arch: int
    variant: KernelVariant
    num_warps: int
    registers: int
    spill_stores: int
    spill_loads: int
    ptx_lines: int


def _signature(variant: KernelVariant) -> tuple[dict[str, str], dict[tuple[int, ...], Any], int]:
    params = list(inspect.signature(triton_kernel.mrope_kernel).parameters)
    hq, hk = (variant.hk, 0) if variant.rerotate else (variant.hq, variant.hk)
    n_freq = variant.rotary_dim // 2
    d_pass = variant.head_dim - variant.rotary_dim
    elem_bytes = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8}[variant.dtype]
    cfg = triton_launch.launch_config(variant.tokens, hq, hk, n_freq, d_pass, elem_bytes, variant.table_heads)
    pos_kind = {"int64": 0, "float32": 1, "float64": 2}[variant.position_dtype]
    pos_ptr = {"int64": "*i64", "float32": "*fp32", "float64": "*fp64"}[variant.position_dtype]
    x_ptr = "*" + _TRITON_TYPES[variant.dtype]
    constexprs = {
        "F": n_freq,
        "D_PASS": d_pass,
        "ROT_OFF": variant.rotary_offset,
        "BLOCK_T": cfg["BLOCK_T"],
        "BLOCK_HQ": cfg["BLOCK_HQ"],
        "BLOCK_HK": cfg["BLOCK_HK"],
        "BLOCK_F": cfg["BLOCK_F"],
        "BLOCK_P": cfg["BLOCK_P"],
        "GPTJ": variant.gptj,
        "EXACT": variant.exact,
        "CONJ": variant.conj,
        "COPY_PASS": variant.out_of_place and d_pass > 0,
        "F64": variant.dtype == "float64",
        "POS_KIND": pos_kind,
        "POS2_KIND": pos_kind,
        "REROTATE": variant.rerotate,
        "RNE_BF16": False,
        "PER_HEAD": variant.table_heads > 1,
    }
    pointers = {"Q": x_ptr, "K": x_ptr, "QO": x_ptr, "KO": x_ptr, "POS": pos_ptr, "POS2": pos_ptr}
    pointers.update({"ROWS": "*i32", "FREQ": "*i64" if variant.exact else "*fp32"})
    signature = {}
    for name in params:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in pointers:
            signature[name] = pointers[name]
        elif name == "attn_factor":
            signature[name] = "fp32"
        else:  # sizes and strides, as a launch with int64 strides passes them
            signature[name] = "i32" if name in ("S", "N", "HQ", "HK", "NT", "GQ", "GK") else "i64"
    by_index = {(params.index(k),): v for k, v in constexprs.items()}
    return signature, by_index, cfg["num_warps"]


def compile_options(variant: KernelVariant, num_warps: int) -> dict[str, Any]:
    """The compiler options a launch of ``variant`` compiles under (:func:`triton_launch.compile_options`,
    those left to the compiler omitted)."""
    options = triton_launch.compile_options(num_warps, 0 if variant.rerotate else variant.hk)
    return {name: value for name, value in options.items() if value is not None}


def _ptxas_report(ptx: str, arch: int) -> tuple[int, int, int]:
    """``(registers, spill stores, spill loads)`` from ``ptxas -v`` on the kernel's PTX."""
    from triton.backends.nvidia.compiler import get_ptxas  # the ptxas triton itself uses for this arch

    ptxas = get_ptxas(arch).path
    suffix = "a" if arch >= 90 else ""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        out = subprocess.run(
            [ptxas, "-v", f"--gpu-name=sm_{arch}{suffix}", path, "-o", os.path.join(tmp, "kernel.cubin")],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
    text = out.stdout + out.stderr
    regs = re.search(r"Used (\d+) registers", text)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text)
    if regs is None or spills is None:
        raise RuntimeError(f"cannot read ptxas' resource report:\n{text}")
    return int(regs.group(1)), int(spills.group(1)), int(spills.group(2))


def compile_variant(variant: KernelVariant, arch: int) -> CompiledVariant:
    """Compile one kernel specialisation for ``sm_{arch}`` (e.g. 80, 90) to a cubin, no GPU needed.

    Raises:
        triton.compiler.errors.CompilationError: if the compiled kernel does not build (the interpreter
            accepts some code the compiler does not).
    """
    signature, constexprs, num_warps = _signature(variant)
    src = ASTSource(fn=triton_kernel.get_kernel(), signature=signature, constexprs=constexprs)
    options = compile_options(variant, num_warps)
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    if not compiled.asm.get("cubin"):
        raise RuntimeError(f"triton.compile produced no cubin for sm_{arch}")
    ptx = compiled.asm["ptx"]
    registers, spill_stores, spill_loads = _ptxas_report(ptx, arch)
    return CompiledVariant(arch, variant, num_warps, registers, spill_stores, spill_loads, ptx.count("\n"))
