"""RoPE-DHR (``model="rope-dhr"``) against its authors' code: tile tokens at their thumbnail's positions.

The reference is LALBJ/CoMemo at d2d9d2f (paper: Liu et al., "CoMemo: LVLMs Need Image Context with
Image Memory", ICML 2025), written out below from comemo/model/comemo_chat/modeling_comemo_chat.py
(``calculate_subimage_indices`` and the RoPE-DHR branch of ``chat``) and mixin_lm.py (the decode step).
The authors run it on InternVL's ids (``<img>``, 256 tokens per tile, ``</img>``); mrope's scheme takes
Qwen2-VL's, so the reference reads ``<|vision_start|>`` / ``<|vision_end|>`` in their place, and an
InternVL image of ``X x Y`` tiles (16 x 16 tokens each) and its thumbnail is
``Image(grid=(1, 32 * Y, 32 * X), tiles=(X, Y), thumbnail=True)`` (merge 2); one tile alone has no
thumbnail (``dynamic_preprocess`` adds it only to several) and is an untiled 32 x 32 image.

ID-Align (Li and Zhang, "ID-Align: RoPE-Conscious Position Remapping for Dynamic High-Resolution
Adaptation in Vision-Language Models", 2025) describes the same inheritance, but its code
(zooblastlbz/ID-Align) could not be read here, so no test holds mrope to it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mrope
from mrope.models import SCHEME_NAMES, get_family

ORIGINAL_SIZE = 16
THUMBNAIL_TOKEN_LENGTH = 256
"""modeling_comemo_chat.py:38-39."""


def calculate_subimage_indices(X, Y, position_bias):
    """modeling_comemo_chat.py:40-77: the positions of an image of ``X`` columns by ``Y`` rows of tiles
    (tiles in the order of the loops below), then its thumbnail's."""
    result = []
    if X > 1 or Y > 1:
        subimage_width = ORIGINAL_SIZE / X - 1e-6
        subimage_height = ORIGINAL_SIZE / Y - 1e-6
        for i in range(X):
            for j in range(Y):
                start_x = i * subimage_width
                end_x = (i + 1) * subimage_width
                start_y = j * subimage_height
                end_y = (j + 1) * subimage_height
                indices = [
                    (int(row) * ORIGINAL_SIZE + int(col) + position_bias)
                    for row in np.linspace(start_y, end_y, ORIGINAL_SIZE)
                    for col in np.linspace(start_x, end_x, ORIGINAL_SIZE)
                ]
                result.extend(indices)
    thumnail_position_ids = (np.arange(0, THUMBNAIL_TOKEN_LENGTH) + position_bias).tolist()
    result.extend(thumnail_position_ids)
    return result


def comemo_position_ids(input_ids, target_aspect_ratio, num_patches_list, start_id, end_id) -> torch.Tensor:
    """modeling_comemo_chat.py:404-427, ``chat`` with ``target_aspect_ratio`` (RoPE-DHR): ``[T]``."""
    input_ids = torch.as_tensor(input_ids)[None]
    position_bias = torch.where(input_ids[0] == start_id)[0] + 1
    img_end_idx = torch.where(input_ids[0] == end_id)[0]
    seq_lens = input_ids[0].shape[0]
    cum_tile_lens = 0
    for i in range(len(position_bias)):
        cur_position_bias = position_bias[i].item()
        cur_aspect_ratio = target_aspect_ratio[i]
        ids = calculate_subimage_indices(
            cur_aspect_ratio[0], cur_aspect_ratio[1], cur_position_bias - cum_tile_lens
        )
        if i == 0:
            position_ids = torch.concat((torch.arange(cur_position_bias), torch.tensor(ids)))
        else:
            between = torch.arange(img_end_idx[i - 1], cur_position_bias) - cum_tile_lens
            position_ids = torch.concat((position_ids, between, torch.tensor(ids)))
        cum_tile_lens += THUMBNAIL_TOKEN_LENGTH * (num_patches_list[i] - 1)
    return torch.concat((position_ids, torch.arange(img_end_idx[-1], seq_lens) - cum_tile_lens))


ASPECTS = [(1, 1), (2, 1), (1, 3), (2, 2), (3, 2), (2, 3), (1, 6), (4, 1)]
"""``(X, Y)`` tile grids of InternVL's ``dynamic_preprocess`` (at most 6 tiles)."""


def _loop_order(x: int, y: int) -> tuple[int, ...]:
    """The row-major index of the tile the authors' loops visit ``k``-th (``i`` over the X columns outer,
    ``j`` over the Y rows inner, modeling_comemo_chat.py:58-59): column by column."""
    return tuple((k % y) * x + k // y for k in range(x * y))


def _image(x: int, y: int, order: tuple[int, ...] | None) -> mrope.Image:
    if x * y == 1:
        return mrope.Image(grid=(1, 32, 32))
    return mrope.Image(grid=(1, 32 * y, 32 * x), tiles=(x, y), thumbnail=True, tile_order=order)


def _prompt(seed: int, loop_order: bool) -> tuple[list[mrope.Segment], list[tuple[int, int]]]:
    """Random text and tiled images, starting and ending with text; the images' ``(X, Y)``."""
    rng = np.random.default_rng(seed)
    segs: list[mrope.Segment] = [mrope.Text(int(rng.integers(1, 6)))]
    aspects = [ASPECTS[int(i)] for i in rng.integers(0, len(ASPECTS), size=int(rng.integers(1, 4)))]
    for x, y in aspects:
        segs += [_image(x, y, _loop_order(x, y) if loop_order else None), mrope.Text(int(rng.integers(1, 6)))]
    return segs, aspects


def _reference(pos: mrope.Positions, aspects, rules: mrope.LayoutRules):
    patches = [x * y + (x * y > 1) for x, y in aspects]
    row = comemo_position_ids(pos.input_ids, aspects, patches, rules.vision_start_id, rules.vision_end_id)
    # the next token after the prompt: the last position plus 1 (mixin_lm.py:186-189)
    return row.expand(3, -1).numpy(), int(row[-1]) + 1 - row.numel()


@pytest.mark.parametrize("seed", range(12))
def test_positions_equal_the_authors_code(seed) -> None:
    """With the tiles in the order the authors' loops visit them (column by column), mrope's positions
    equal theirs exactly, delta included."""
    rules = get_family("rope-dhr").rules
    segs, aspects = _prompt(seed, loop_order=True)
    pos = mrope.build_positions(segs, model="rope-dhr")
    want, delta = _reference(pos, aspects, rules)
    assert pos.ids.dtype == np.int64
    np.testing.assert_array_equal(pos.ids, want)
    assert pos.delta == delta
    # the whole image spans its thumbnail's positions alone: 256 per image, whatever its tiles
    assert pos.ids.max() + 1 == sum(s.num_tokens for s in segs if isinstance(s, mrope.Text)) + 258 * len(
        aspects
    )


def test_row_major_tiles_equal_the_authors_code_where_the_orders_agree() -> None:
    """InternVL emits tiles row by row (comemo/train/dataset.py:713-722); the authors' loops visit them
    column by column, which is the same order for a single row or column of tiles. mrope gives each
    tile the thumbnail tokens over it in the order the tiles come, so on row-major tiles it equals the
    authors' code on those grids and differs on the others (2 x 2: the top-right and bottom-left tiles
    trade places in the authors' code)."""
    rules = get_family("rope-dhr").rules
    for x, y in ASPECTS:
        segs = [mrope.Text(3), _image(x, y, None), mrope.Text(2)]
        pos = mrope.build_positions(segs, model="rope-dhr")
        want, _ = _reference(pos, [(x, y)], rules)
        assert np.array_equal(pos.ids, want) == (x == 1 or y == 1)


def test_negative_controls() -> None:
    """The reference tells the rules apart: the tiles laid out on their own (``independent``, the
    positions growing with the tiles) and the untiled grid (``global``) differ."""
    segs, aspects = _prompt(1, loop_order=True)
    rules = get_family("rope-dhr").rules
    want, _ = _reference(mrope.build_positions(segs, rules=rules), aspects, rules)
    assert any(x * y > 1 for x, y in aspects)
    for wrong in (rules.replace(tiles="independent"), rules.replace(tiles="global")):
        assert not np.array_equal(mrope.build_positions(segs, rules=wrong).ids, want)


def test_the_thumbnail_is_needed() -> None:
    with pytest.raises(mrope.MRopeError, match="needs its thumbnail"):
        mrope.build_positions([mrope.Image(grid=(1, 64, 64), tiles=(2, 2))], model="rope-dhr")


def test_batch_packing_and_continuation_keep_the_positions() -> None:
    """Batches and packed rows hold each sample's positions; a continued turn is the tail of the whole
    conversation (the counter resumes one past the thumbnail)."""
    prompts = [_prompt(s, loop_order=True)[0] for s in range(3)]
    built = [mrope.build_positions(p, model="rope-dhr") for p in prompts]
    batch = mrope.build_batch(prompts, model="rope-dhr")
    packed = mrope.pack(prompts, model="rope-dhr", max_length=8192)
    for row, pos in enumerate(built):
        valid = batch.attention_mask[row].astype(bool)
        np.testing.assert_array_equal(batch.ids[:, row][:, valid], pos.ids)
        np.testing.assert_array_equal(pos.program().expand(), pos.ids)
    for prow in packed.rows:
        for k, sample in enumerate(prow.samples):
            a, b = int(prow.cu_seqlens[k]), int(prow.cu_seqlens[k + 1])
            np.testing.assert_array_equal(prow.position_ids[1:, a:b], built[sample].ids)
    whole = mrope.build_positions([*prompts[0], mrope.Text(3), *prompts[1]], model="rope-dhr")
    turn = mrope.continue_positions(built[0], prompts[1], generated=3, model="rope-dhr")
    np.testing.assert_array_equal(turn.positions.ids, whole.ids[:, -turn.positions.num_tokens :])
    assert turn.state.delta == whole.delta


def test_rotation_is_qwen2_vls_on_one_row() -> None:
    """Every row equal: Qwen2-VL's sections all read the one position (cos equal to a 1-D table of the
    t row), as the authors' InternLM2 rotates by one position per token."""
    spec = get_family("rope-dhr").spec
    pos = torch.from_numpy(mrope.build_positions(_prompt(0, True)[0], model="rope-dhr").ids)
    inv_freq = 1.0 / (spec.theta ** (torch.arange(0, 128, 2, dtype=torch.int64).float() / 128))
    freqs = torch.outer(pos[0].float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    torch.testing.assert_close(mrope.cos_sin(pos, spec)[0], emb.cos(), atol=0, rtol=0)
    assert "rope-dhr" in SCHEME_NAMES
