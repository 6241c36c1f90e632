"""Padding-free packing of training rows: many samples per row, each sample's positions its own.

:func:`pack` builds the rows (first-fit-decreasing, or order-keeping streaming), :class:`PackedRow` /
:class:`PackedBatch` / :class:`PaddedPack` hold them, ``model_inputs`` turns them into a transformers
forward's keyword arguments, :func:`shard` cuts a row into one rank's tokens for context or sequence
parallelism (:class:`ShardedRow`; :func:`shard_samples` builds a rank's arrays from the samples
without the row's positions), :class:`PackedCollator` packs processor outputs for ``Trainer`` / TRL
(torch: loaded on first use). See
docs/packing.md.
"""

from mrope.packing._bins import efficiency, first_fit_decreasing, stream_rows
from mrope.packing._rank import shard_samples
from mrope.packing._rows import PackedBatch, PackedRow, PaddedPack, pack, pad_rows
from mrope.packing._shard import SHARD_LAYOUTS, ShardedRow, shard
from mrope.packing._support import PACKED_INPUT, PackedInput, check_packed_input


def __getattr__(name: str):  # the collator needs torch: loaded when asked for
    if name == "PackedCollator":
        from mrope.packing._collator import PackedCollator

        return PackedCollator
    raise AttributeError(f"module 'mrope.packing' has no attribute {name!r}")


__all__ = [
    "PACKED_INPUT",
    "PackedCollator",
    "PackedBatch",
    "PackedInput",
    "PackedRow",
    "PaddedPack",
    "SHARD_LAYOUTS",
    "ShardedRow",
    "check_packed_input",
    "efficiency",
    "first_fit_decreasing",
    "pack",
    "pad_rows",
    "shard",
    "shard_samples",
    "stream_rows",
]
