"""Which transformers models keep packed samples apart, and the check that refuses the ones that cannot.

transformers 5.24 keeps the samples of a packed row apart when ``position_ids`` has one row more than the
rotary's axes, that first row (the text row) restarting at 0 for every sample, with no attention mask and
no cache (``masking_utils.find_packed_sequence_indices`` turns the text row into sample ids;
``modeling_qwen2_vl.py:781`` splits the text row off). Each family says how its model does (its
``ModelFamily.packed_input``); this table says what each answer means.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from mrope._errors import PackingError

IGNORE_INDEX = -100
"""The label transformers' losses skip (padding, and tokens that predict nothing in their sample)."""


@dataclass(frozen=True)
class PackedInput:
    """What a kind of model needs to keep packed samples apart.

    Attributes:
        packages: import names that must be importable (kernels that take the sample boundaries).
        needs: said in the error when one is missing.
        refused: why the model cannot take packed input at all (``""``: it can).
    """

    packages: tuple[str, ...] = ()
    needs: str = ""
    refused: str = ""


PACKED_INPUT: dict[str, PackedInput] = {
    "text-row": PackedInput(),
    "text-row+fla": PackedInput(
        packages=("fla", "causal_conv1d"),
        needs=(
            "its linear-attention (Gated DeltaNet) layers keep packed samples apart only with the "
            "flash-linear-attention and causal-conv1d kernels (GPU; pip install flash-linear-attention "
            "causal-conv1d), which read the boundaries from cu_seq_lens_q: transformers 5.24's torch "
            "fallbacks (chunk_gated_delta_rule, causal_conv1d_fn) run the row as one sequence"
        ),
    ),
    "none": PackedInput(
        refused=(
            "its transformers 5.24 text model takes no packed rows: given the text row on top of its "
            "axes it keeps all of them and raises (models/hunyuan_vl/modeling_hunyuan_vl.py:803-813); "
            "train one sample per row, or use the packed positions with another implementation"
        )
    ),
}
"""``ModelFamily.packed_input`` -> what it means."""


def check_packed_input(kind: str, family: str) -> None:
    """Refuse packed model inputs for a model that cannot keep the samples apart (a :class:`PackingError`
    naming the requirement)."""
    entry = PACKED_INPUT.get(kind)
    if entry is None:
        raise PackingError(f"{family}: unknown packed_input {kind!r}; expected one of {list(PACKED_INPUT)}")
    if entry.refused:
        raise PackingError(f"{family}: cannot take packed input: {entry.refused}")
    missing = [name for name in entry.packages if importlib.util.find_spec(name) is None]
    if missing:
        raise PackingError(f"{family}: packed input needs {', '.join(missing)}: {entry.needs}")


__all__ = ["IGNORE_INDEX", "PACKED_INPUT", "PackedInput", "check_packed_input"]
