"""A patched model reads leniently what the unpatched model reads anyway; mrope's own API stays strict.

Each case is a token stream / grid set transformers 5.24's model accepts and mrope's reader refuses:
the patched model's ``get_rope_index`` and logits equal the unpatched model's (the expected values come
from the model itself), one :class:`mrope.MRopeWarning` names what the model silently did, a second call
does not warn again, and :func:`mrope.get_rope_index` on the same input still raises
:class:`mrope.TokenError` (the negative control: the switch is the patch's alone).
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import pytest
import torch
from support import tiny_vlm as tv
from support.tiny_vlm import patched

import mrope
from mrope.integrations.transformers import model_rules


class Case(NamedTuple):
    family: str
    ids: list[list[int]]  # token ids, the ids named by the tiny model's config filled in by ``tokens``
    grids: list[list[int]] | None  # image_grid_thw
    hidden: tuple[int, int, int] | None  # (row, first, stop) of attention-mask zeros
    note: str  # a phrase of the warning


# (1, 4, 4) with merge size 2: 4 placeholder tokens. S / E / I / V: vision start / end, image / video id
CASES: dict[str, Case] = {
    # Qwen2.5-Omni's get_rope_index searches a video id only while vision_start + video blocks remain
    "omni-stray-video": Case(
        "qwen2.5-omni",
        [[5, "V", 6, "S", "I", "I", "I", "I", "E", 7, "V", 8]],
        [[1, 4, 4]],
        None,
        "outside a start / end block",
    ),
    # ... lays out blocks only when a grid is given; else it numbers the valid tokens
    "omni-no-grid": Case(
        "qwen2.5-omni", [[5, "S", "I", "I", "I", "I", "E", 7, 8]], None, None, "without any image_grid_thw"
    ),
    # ... takes the token after a run as its vision_end, whatever its id
    "omni-no-closing-token": Case(
        "qwen2.5-omni", [[5, "S", "I", "I", "I", "I", 9, 7, 8]], [[1, 4, 4]], None, "other than vision_end"
    ),
    # ... indexes grids by the blocks it meets
    "omni-unused-grid": Case(
        "qwen2.5-omni",
        [[5, "S", "I", "I", "I", "I", "E", 7, 8]],
        [[1, 4, 4], [1, 4, 4]],
        None,
        "no block uses are ignored",
    ),
    # Qwen3-Omni's get_rope_index finds blocks by vision_start, so a stray placeholder a block of its
    # kind follows is text too (Qwen2.5-Omni refuses that one: the last test below)
    "qwen3-omni-stray-image-before-block": Case(
        "qwen3-omni",
        [[5, "I", 6, "S", "I", "I", "I", "I", "E", 7, 8]],
        [[1, 4, 4]],
        None,
        "where the model finds no block by them",
    ),
    "qwen3-omni-stray-ids-around-block": Case(
        "qwen3-omni",
        [[5, "V", "I", 6, "S", "I", "I", "I", "I", "E", 7, "I", 8]] * 2,
        [[1, 4, 4], [1, 4, 4]],
        (1, 0, 3),
        "outside a start / end block",
    ),
}
for _family in ("cosmos3-edge", "qwen2-vl"):
    # the transformers 5.x get_rope_index takes one grid per run from an iterator: row 1's image is masked
    CASES[f"{_family}-masked-image"] = Case(
        _family,
        [[5, "S", "I", "I", "I", "I", "E", 7, 8]] * 2,
        [[1, 4, 4], [1, 4, 4]],
        (1, 1, 7),
        "no placeholder run uses",
    )


def _inputs(case: Case) -> dict[str, Any]:
    """``get_rope_index`` / forward keyword arguments of ``case`` for its tiny model."""
    config = tv.model(case.family).config
    named = {
        "S": config.vision_start_token_id,
        "E": config.vision_end_token_id,
        "I": config.image_token_id,
        "V": config.video_token_id,
    }
    ids = torch.tensor([[named.get(t, t) for t in row] for row in case.ids])
    mask = torch.ones_like(ids)
    if case.hidden is not None:
        row, first, stop = case.hidden
        mask[row, first:stop] = 0
    out: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
    if case.grids is not None:
        out["image_grid_thw"] = torch.tensor(case.grids)
    if "omni" not in case.family:  # the 5.x families read the runs from the type ids
        out["mm_token_type_ids"] = (ids == config.image_token_id).long() + 2 * (
            ids == config.video_token_id
        ).long()
    return out


def _rope_index(net: Any, kw: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    return net.model.get_rope_index(**kw)


def _logits(net: Any, kw: dict[str, Any]) -> torch.Tensor:
    net.model.rope_deltas = None
    with torch.no_grad():
        out = net(**kw, use_cache=False).logits
    net.model.rope_deltas = None
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_patched_model_reads_what_the_model_reads_and_warns_once(name: str) -> None:
    case = CASES[name]
    net = tv.model(case.family)
    kw = _inputs(case)
    want_index, want_logits = _rope_index(net, kw), _logits(net, kw)
    with patched(net):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got_index = _rope_index(net, kw)
            got_logits = _logits(net, kw)
        notes = [str(w.message) for w in caught if issubclass(w.category, mrope.MRopeWarning)]
    assert torch.equal(got_index[0], want_index[0]), (got_index[0], want_index[0])
    assert torch.equal(got_index[1].reshape(-1), want_index[1].reshape(-1))
    torch.testing.assert_close(got_logits, want_logits, rtol=0, atol=2e-6)
    assert len(notes) == 1, notes  # two readings of the same input: one warning
    assert case.note in notes[0], notes


@pytest.mark.parametrize("name", list(CASES))
def test_the_library_stays_strict_on_the_same_input(name: str) -> None:
    case = CASES[name]
    kw = _inputs(case)
    rules = model_rules(tv.model(case.family))
    with pytest.raises(mrope.TokenError):
        mrope.get_rope_index(kw.pop("input_ids"), model=case.family, rules=rules, **kw)


def test_a_stray_placeholder_a_block_follows_is_refused_by_the_patched_model_too() -> None:
    """Qwen2.5-Omni takes a stray image id that an image block follows as the block's start, misplacing
    the block: no leniency there (the patched model refuses it as mrope does)."""
    case = Case("qwen2.5-omni", [[5, "I", 6, "S", "I", "I", "I", "I", "E", 7]], [[1, 4, 4]], None, "")
    net = tv.model(case.family)
    kw = _inputs(case)
    with patched(net), pytest.raises(mrope.TokenError, match="would misplace it"):
        _rope_index(net, kw)
