"""mrope.ops: apply M-RoPE to queries and keys (torch path on any device, Triton kernel on CUDA).

Public API: :func:`apply_mrope` rotates q and k; :func:`cos_sin` gives transformers-shaped cos/sin tables.
See :mod:`mrope.ops.dispatch` for layouts and backends, :mod:`mrope.ops.freqs` for angle precision,
:mod:`mrope.ops.triton_kernel` for the kernel.
"""

from mrope.ops.dispatch import ANGLE_PRECISIONS, BACKENDS, LAYOUTS, apply_mrope, cos_sin

__all__ = ["ANGLE_PRECISIONS", "BACKENDS", "LAYOUTS", "apply_mrope", "cos_sin"]
