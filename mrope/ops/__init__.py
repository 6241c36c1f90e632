"""mrope.ops: apply M-RoPE to queries and keys (torch path on any device, Triton kernel on CUDA).

Public API: :func:`apply_mrope` rotates q and k; :func:`cos_sin` gives transformers-shaped cos/sin tables;
:func:`rerotate` moves cached keys from one set of positions to another; :func:`pair_table` turns a rotary
spec into the :class:`PairTable` every op reads (a row and a frequency per rotary pair), which can also be
given in place of a spec (any number of position rows, NoPE pairs, per-head rows); :func:`golden_gate_table`
and :func:`golden_gate_positions` are golden-gate RoPE's (Falcon-OCR: learned per-head 2-D frequencies);
:func:`layer_cos_sin` gives
each decoder layer the cos / sin of the position set it reads; :func:`expand_program` expands a
position program's runs (:meth:`mrope.PositionProgram.arrays`) on a device.
See :mod:`mrope.ops._dispatch` for layouts, backends and autograd, :mod:`mrope.ops._pairs` for the table,
:mod:`mrope.ops._freqs` for the two angle
precisions, :mod:`mrope.ops._torch_path` and :mod:`mrope.ops._triton_kernel` (launched by
:mod:`mrope.ops._triton_launch`) for the two implementations.
This package never imports the coordinate builder.
"""

from mrope import _extras

_extras.require("mrope.ops", "torch", "torch")

from mrope.ops._dispatch import (
    ANGLE_PRECISIONS,
    BACKENDS,
    LAYOUTS,
    Backend,
    Layout,
    apply_mrope,
    cos_sin,
    rerotate,
)
from mrope.ops._expand import expand_program
from mrope.ops._freqs import AnglePrecision
from mrope.ops._golden_gate import golden_gate_positions, golden_gate_table
from mrope.ops._layers import layer_cos_sin
from mrope.ops._pairs import PairTable, pair_table

__all__ = [
    "ANGLE_PRECISIONS",
    "BACKENDS",
    "LAYOUTS",
    "AnglePrecision",
    "Backend",
    "Layout",
    "PairTable",
    "apply_mrope",
    "cos_sin",
    "expand_program",
    "golden_gate_positions",
    "golden_gate_table",
    "layer_cos_sin",
    "pair_table",
    "rerotate",
]
