"""The image-step engine (``positions_base="image_step"``): Falcon-OCR's positions, t and float (h, w).

Reference: TII's ``falcon-perception`` 1.0.0 (PyPI wheel; tiiuae/Falcon-Perception), its numpy position code
written out in ``tests/support/falcon_perception.py``: ``falcon_perception/data.py`` ``_compute_image_spatial_positions`` :330-357,
``_get_image_token_masks`` :360-371, ``get_pos_thw`` :407-458 (the batch form; on an unpadded row it is
``get_pos_thw_single`` :374-404), the image block of ``tokenize_inputs`` :514-521. Ids are the released
config's (mlx-vlm 0.7.10 ``mlx_vlm/models/falcon_ocr/config.py``:44-51: image 227, end 230, cls 244,
registers 245-248); deltas as mlx-vlm's ``get_rope_index`` (language.py:453-454 there: ``max(t) + 1 - n``).

Each check runs on these rules and on the registry's ``model="falcon-ocr"`` (the same rules by name).
Prompts: random text and 1 to 3 images of random grids per row. Negative controls: no registers (they then
advance t), the counter rule, a left-padded row (the batch reference counts its pads into t, which mrope's
valid-token positions do not: a known difference, asserted).
"""

from __future__ import annotations

import numpy as np
import pytest
from support.falcon_perception import CLS, END, IMG, PAD, as_rows, image_block, tii_pos_thw

from mrope import (
    Image,
    LayoutError,
    LayoutRules,
    MediaError,
    Text,
    Video,
    build_batch,
    build_positions,
    continue_positions,
    numpy_rope_index,
)
from mrope.media import image_grid

RULES = LayoutRules(
    positions_base="image_step",
    vision_start_id=CLS,
    vision_registers=4,
    vision_end_id=END,
    image_pad_id=IMG,
    video_pad_id=229,
    patch_size=16,
    merge_size=1,
    temporal_patch_size=1,
    video_support="none",
    pad_position=0,
)
BY = {"rules": {"rules": RULES}, "name": {"model": "falcon-ocr"}}
"""The two ways the checks name the rules: given in full, and the registry family by name."""


# ------------------------------------------------------------------------------------------- prompts


def prompt(rng: np.random.Generator) -> tuple[list, list[int], list[tuple[int, int]]]:
    """Random segments, the token ids falcon-perception's tokenize_inputs writes for them, the grids."""
    segments, ids, grids = [], [], []
    for _ in range(int(rng.integers(1, 4))):
        if rng.random() < 0.8:
            text = rng.integers(300, 60000, int(rng.integers(1, 7))).tolist()
            segments.append(Text(text))
            ids += text
        h, w = (int(x) for x in rng.integers(1, 12, 2))
        segments.append(Image(grid=(1, h, w)))
        ids += image_block(h, w)
        grids.append((h, w))
    if rng.random() < 0.7:
        text = rng.integers(300, 60000, int(rng.integers(1, 7))).tolist()
        segments.append(Text(text))
        ids += text
    return segments, ids, grids


# ------------------------------------------------------------------------------------------------ tests


@pytest.mark.parametrize("by", BY)
@pytest.mark.parametrize("seed", range(30))
def test_build_positions_equal_tii(seed: int, by: str) -> None:
    """Segments -> positions and ids: data.py's on the same prompt, t and float32 (h, w) bit for bit."""
    segments, ids, grids = prompt(np.random.default_rng(seed))
    got = build_positions(segments, **BY[by])
    tpos, hw = tii_pos_thw(np.array([ids]), grids)
    assert got.ids.dtype == np.float32
    assert np.array_equal(got.input_ids, ids)
    assert np.array_equal(got.ids, as_rows(tpos, hw)[:, 0])
    assert got.delta == tpos.max() + 1 - len(ids)


@pytest.mark.parametrize("by", BY)
@pytest.mark.parametrize("seed", range(10))
def test_token_ids_equal_tii_on_right_padded_batches(seed: int, by: str) -> None:
    """Token ids of a right-padded batch -> positions: data.py's get_pos_thw (pads 0, data.py:455)."""
    rng = np.random.default_rng(100 + seed)
    rows = [prompt(rng) for _ in range(3)]
    length = max(len(r[1]) for r in rows)
    tokens = np.full((3, length), PAD, dtype=np.int64)
    mask = np.zeros((3, length), dtype=np.int64)
    for b, (_, ids, _) in enumerate(rows):
        tokens[b, : len(ids)], mask[b, : len(ids)] = ids, 1
    grids = [g for r in rows for g in r[2]]
    got, deltas = numpy_rope_index(tokens, [(1, h, w) for h, w in grids], attention_mask=mask, **BY[by])
    tpos, hw = tii_pos_thw(tokens, grids)
    assert np.array_equal(got, as_rows(tpos, hw))
    assert np.array_equal(deltas.ravel(), tpos.max(axis=1) + 1 - mask.sum(axis=1))


def test_left_padding_differs_as_documented() -> None:
    """Negative control: the batch reference counts a left-padded row's pads into t (cumsum over the row,
    data.py:452-454); mrope's positions count valid tokens, so that row is shifted by its pad count."""
    segments, ids, grids = prompt(np.random.default_rng(5))
    tokens = np.array([[PAD, PAD, *ids]])
    got, _ = numpy_rope_index(
        tokens, [(1, h, w) for h, w in grids], attention_mask=(tokens != PAD), rules=RULES
    )
    tpos, hw = tii_pos_thw(tokens, grids)
    assert np.array_equal(got[0, 0, 2:] + 2, tpos[0, 2:])
    assert np.array_equal(got[1:, 0], as_rows(tpos, hw)[1:, 0])


def test_negative_controls() -> None:
    """Registers that advance t, or the counter rule, give other positions than data.py's."""
    segments, ids, grids = prompt(np.random.default_rng(3))
    want = as_rows(*tii_pos_thw(np.array([ids]), grids))[:, 0]
    no_regs = build_positions(segments, rules=RULES.replace(vision_registers=0))
    assert no_regs.ids.shape[1] == len(ids) - 4 * len(grids)
    counter = build_positions(
        segments, rules=RULES.replace(positions_base="counter", vision_registers=0, video_support="sized")
    )
    assert counter.ids.shape != want.shape or not np.array_equal(counter.ids, want)


def test_text_after_each_image_resumes_one_past_it() -> None:
    """A whole image block is one step: text after it is at that step + 1; (h, w) of text are 0."""
    got = build_positions([Text(2), Image(grid=(1, 2, 2)), Text(1), Image(grid=(1, 1, 3))], rules=RULES)
    t = got.ids[0]
    assert t.tolist() == [0, 1] + [2] * (5 + 4 + 1) + [3] + [4] * (5 + 3 + 1)
    assert np.array_equal(got.ids[1:, :2], np.zeros((2, 2)))
    assert got.ids[1, 7:11].tolist() == pytest.approx([-1, -1, 1, 1]) and got.ids[2, 7:11].tolist() == [
        -1,
        1,
        -1,
        1,
    ]


def test_refusals() -> None:
    with pytest.raises(LayoutError, match="vision_registers"):
        LayoutRules(vision_registers=4)
    with pytest.raises(LayoutError, match="vision_registers"):
        RULES.replace(vision_registers=2.0)
    with pytest.raises(LayoutError, match="one frame"):
        build_positions([Image(grid=(2, 2, 2))], rules=RULES)
    with pytest.raises(LayoutError):
        build_positions([Video(grid=(2, 4, 4))], rules=RULES)
    with pytest.raises(MediaError, match="image_step"):
        image_grid(640, 480, rules=RULES)


@pytest.mark.parametrize("by", BY)
@pytest.mark.parametrize("seed", range(5))
def test_continued_turn_equals_the_tail_of_the_whole(seed: int, by: str) -> None:
    """A turn appended after generated tokens: the tail of the whole conversation built at once."""
    rng = np.random.default_rng(200 + seed)
    first, _, _ = prompt(rng)
    second, _, _ = prompt(rng)
    turn = continue_positions(build_positions(first, **BY[by]), second, generated=3)
    whole = build_positions([*first, Text(3), *second], **BY[by])
    assert np.array_equal(turn.positions.ids, whole.ids[:, -turn.positions.num_tokens :])


@pytest.mark.parametrize("by", BY)
def test_batch_of_prompts_equals_tii_right_padded(by: str) -> None:
    """build_batch (right padding, pads 0): data.py's get_pos_thw on the same padded token ids."""
    rng = np.random.default_rng(300)
    rows = [prompt(rng) for _ in range(4)]
    batch = build_batch([r[0] for r in rows], **BY[by], padding_side="right", pad_token_id=PAD)
    tpos, hw = tii_pos_thw(np.asarray(batch.input_ids), [g for r in rows for g in r[2]])
    assert batch.ids.dtype == np.float32
    assert np.array_equal(batch.ids, as_rows(tpos, hw))
