"""The research schemes (MRoPE-Interleave with spatial reset, MHRoPE, VideoRoPE) against their authors' code.

Each reference below is the authors' published code written out (torch, one row, no padding), with its
repository, commit and lines; mrope's positions (builder and token ids) and rotation (``cos_sin``,
``apply_mrope``) must equal it on random prompts of text, images and videos, and each check has a
negative control that shows it can fail.

- MRoPE-Interleave / MHRoPE: JJJYmmm/Multimodal-RoPEs at cd413b9 (paper: Huang et al., "Revisiting
  Multimodal Positional Encoding in Vision-Language Models", ICLR 2026).
- VideoRoPE: Wiselnn570/VideoRoPE at 7712ca3, videorope-transformer/modeling_videorope.py (paper: Wei et
  al., "VideoRoPE: What Makes for Good Video Rotary Position Embedding?", ICML 2025).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mrope
from mrope import RopeSpec
from mrope._cli import main
from mrope.models import SCHEME_NAMES, get_family, resolve_rules
from mrope.ops import PairTable, pair_table

SEEDS = range(12)


def _tokenizer(text: str) -> list[int]:
    """Timestamp text -> ids (Qwen3-VL's videos): a length that varies with the text, ids outside the
    vision ones."""
    return [11] * (1 + len(text) % 3)


def _prompt(seed: int) -> list[mrope.Segment]:
    """Random text, images and videos (encoder grids, merge 2), starting and ending with text."""
    rng = np.random.default_rng(seed)
    segs: list[mrope.Segment] = [mrope.Text(int(rng.integers(1, 6)))]
    for _ in range(int(rng.integers(1, 4))):
        h, w = 2 * int(rng.integers(1, 6)), 2 * int(rng.integers(1, 6))
        if rng.random() < 0.5:
            segs.append(mrope.Image(grid=(1, h, w)))
        else:
            segs.append(mrope.Video(grid=(int(rng.integers(1, 5)), h, w), second_per_grid=1.0))
        segs.append(mrope.Text(int(rng.integers(1, 6))))
    return segs


# ------------------------------------------------------------------------ the authors' positions


def _blocks(input_ids: list[int], ids: dict[str, int], image_grid, video_grid):
    """The block walk every reference shares (pos_design/mrope_i.py:45-90, modeling_videorope.py:1542-1571):
    for each vision block in order, ``(text_len before it, its LLM grid (t, h, w), where it starts)``."""
    starts = [i for i, x in enumerate(input_ids) if x == ids["vision_start"]]
    following = [input_ids[i + 1] for i in starts]
    image_nums, video_nums = following.count(ids["image"]), following.count(ids["video"])
    st, image_index, video_index, out = 0, 0, 0, []
    remain_images, remain_videos = image_nums, video_nums
    for _ in range(image_nums + video_nums):
        ed_image = input_ids.index(ids["image"], st) if remain_images > 0 else len(input_ids) + 1
        ed_video = input_ids.index(ids["video"], st) if remain_videos > 0 else len(input_ids) + 1
        if ed_image < ed_video:
            t, h, w = (int(v) for v in image_grid[image_index])
            image_index, remain_images, ed = image_index + 1, remain_images - 1, ed_image
        else:
            t, h, w = (int(v) for v in video_grid[video_index])
            video_index, remain_videos, ed = video_index + 1, remain_videos - 1, ed_video
        out.append((ed - st, (t, h // 2, w // 2), ed))
        st = yield out[-1]
    yield None


def grid_index(llm_grid_t: int, llm_grid_h: int, llm_grid_w: int) -> tuple[torch.Tensor, ...]:
    """The frame, row and column of every token of a ``T' x H' x W'`` block in raster order, as each
    reference builds them (pos_design/mrope_i.py:104-121, omnirope.py:90-108)."""
    t_index = torch.arange(llm_grid_t).view(-1, 1).expand(-1, llm_grid_h * llm_grid_w).flatten()
    h_index = torch.arange(llm_grid_h).view(1, -1, 1).expand(llm_grid_t, -1, llm_grid_w).flatten()
    w_index = torch.arange(llm_grid_w).view(1, 1, -1).expand(llm_grid_t, llm_grid_h, -1).flatten()
    return t_index, h_index, w_index


def mrope_interleave_index(input_ids, image_grid, video_grid, ids, stride: int, split_video: bool):
    """JJJYmmm/Multimodal-RoPEs multimodal_ropes/pos_design/mrope_i.py:7-161 with ``spatial_reset=True``:
    ``[3, T]`` positions and the delta. ``split_video`` is lines 19-23 (Qwen3-VL: a video is one block per
    frame; line 18 says to drop them for Qwen2/2.5-VL). The stride is an int here (mrope's rule; the
    authors' float 1.0 gives the same values after their cast to the int64 ids, line 152)."""
    video_grid = torch.as_tensor(video_grid).reshape(-1, 3).clone()
    if split_video:
        video_grid = torch.repeat_interleave(video_grid, video_grid[:, 0], dim=0)
        video_grid[:, 0] = 1
    tokens = [int(x) for x in input_ids]
    llm_pos_ids_list: list[torch.Tensor] = []
    walk = _blocks(tokens, ids, image_grid, video_grid)
    block = next(walk)
    st = 0
    while block is not None:
        text_len, (llm_grid_t, llm_grid_h, llm_grid_w), ed = block
        st_idx = llm_pos_ids_list[-1].max() + 1 if llm_pos_ids_list else 0
        llm_pos_ids_list.append(torch.arange(text_len).view(1, -1).expand(3, -1) + st_idx)
        t_index, h_index, w_index = grid_index(llm_grid_t, llm_grid_h, llm_grid_w)
        mm_pos_ids = torch.stack([t_index * stride, h_index, w_index])  # spatial_reset: lines 122-132
        vision_end_token_id = torch.full((3, 1), torch.max(mm_pos_ids).item() + 1 + text_len + st_idx)
        mm_pos_ids[0] += text_len + st_idx
        llm_pos_ids_list.append(torch.cat([mm_pos_ids, vision_end_token_id], dim=1))
        st = ed + llm_grid_t * llm_grid_h * llm_grid_w + 1
        block = walk.send(st)
    if st < len(tokens):
        st_idx = llm_pos_ids_list[-1].max() + 1 if llm_pos_ids_list else 0
        llm_pos_ids_list.append(torch.arange(len(tokens) - st).view(1, -1).expand(3, -1) + st_idx)
    llm_positions = torch.cat(llm_pos_ids_list, dim=1).reshape(3, -1)
    return llm_positions, int(llm_positions.max() + 1 - len(tokens))


def videorope_index(input_ids, image_grid, video_grid, ids, scale_factor: float = 2.0):
    """Wiselnn570/VideoRoPE videorope-transformer/modeling_videorope.py:1507-1626,
    ``get_t_scale_rope_index`` (float positions; ``scale_factor`` 2.0 as at :2104 and :2208)."""
    tokens = [int(x) for x in input_ids]
    llm_pos_ids_list: list[torch.Tensor] = []
    walk = _blocks(tokens, ids, image_grid, torch.as_tensor(video_grid).reshape(-1, 3))
    block = next(walk)
    st = 0
    while block is not None:
        text_len, (llm_grid_t, llm_grid_h, llm_grid_w), ed = block
        st_idx = llm_pos_ids_list[-1][0].max() + 1 if llm_pos_ids_list else 0
        llm_pos_ids_list.append(torch.arange(text_len).view(1, -1).expand(3, -1) + st_idx)
        t_index = torch.arange(llm_grid_t).view(-1, 1).expand(-1, llm_grid_h * llm_grid_w).flatten()
        h_index = (
            torch.arange(llm_grid_h).view(1, -1, 1).expand(llm_grid_t, -1, llm_grid_w).flatten()
            - (llm_grid_h - 1) // 2
        )
        w_index = (
            torch.arange(llm_grid_w).view(1, 1, -1).expand(llm_grid_t, llm_grid_h, -1).flatten()
            - (llm_grid_w - 1) // 2
        )
        t_index = t_index * scale_factor
        t_index = t_index + text_len + st_idx
        h_index = h_index + t_index
        w_index = w_index + t_index
        llm_pos_ids_list.append(torch.stack([t_index, h_index, w_index]))
        st = ed + llm_grid_t * llm_grid_h * llm_grid_w
        block = walk.send(st)
    if st < len(tokens):
        st_idx = llm_pos_ids_list[-1][0].max() + 1 if llm_pos_ids_list else 0
        llm_pos_ids_list.append(torch.arange(len(tokens) - st).view(1, -1).expand(3, -1) + st_idx)
    llm_positions = torch.cat(llm_pos_ids_list, dim=1).reshape(3, -1).float()
    return llm_positions, float(llm_positions[0].max() + 1 - len(tokens))


def _ids(rules: mrope.LayoutRules) -> dict[str, int]:
    return {"vision_start": rules.vision_start_id, "image": rules.image_pad_id, "video": rules.video_pad_id}


def _reference(name: str, positions: mrope.Positions, rules: mrope.LayoutRules, **kw):
    args = (positions.input_ids, positions.image_grid_thw, positions.video_grid_thw, _ids(rules))
    if name == "videorope":
        return videorope_index(*args, **kw)
    split = rules.temporal == "timestamps"
    return mrope_interleave_index(*args, stride=kw.get("stride", rules.temporal_stride), split_video=split)


SCHEME_CASES = [
    ("mrope-interleave", "mrope-interleave", None),
    ("mhrope", "mhrope", None),
    ("videorope", "videorope", None),
    # a scheme's rules applied to another family: MRoPE-I on Qwen2-VL's one-block videos, stride 2
    ("mrope-interleave", "qwen2-vl", {"spatial": "reset", "advance": "block", "temporal_stride": 2}),
]


@pytest.mark.parametrize(("scheme", "model", "overrides"), SCHEME_CASES)
@pytest.mark.parametrize("seed", SEEDS)
def test_positions_equal_the_authors_code(scheme, model, overrides, seed) -> None:
    rules = resolve_rules(model, overrides)
    pos = mrope.build_positions(_prompt(seed), model=model, rules=overrides, tokenizer=_tokenizer)
    want, delta = _reference(scheme, pos, rules)
    np.testing.assert_array_equal(pos.ids, want.numpy())
    assert pos.delta == delta
    # the token-id interface reads the same prompt back from its ids
    got, deltas = rope_index_of(pos, model=model, rules=overrides)
    np.testing.assert_array_equal(got[:, 0].numpy(), want.numpy())
    assert deltas.tolist() == [[delta]]


def test_batch_rows_equal_the_authors_code() -> None:
    prompts = [_prompt(s) for s in range(4)]
    for name in ("mrope-interleave", "videorope"):
        rules = get_family(name).rules
        batch = mrope.build_batch(prompts, model=name, tokenizer=_tokenizer)
        for row, prompt in enumerate(prompts):
            pos = mrope.build_positions(prompt, model=name, tokenizer=_tokenizer)
            want, _ = _reference(name, pos, rules)
            n = pos.num_tokens
            valid = batch.attention_mask[row].astype(bool)
            np.testing.assert_array_equal(batch.ids[:, row][:, valid], want.numpy())
            assert valid.sum() == n


@pytest.mark.parametrize("seed", SEEDS)
def test_negative_controls_of_the_positions(seed) -> None:
    """The reference tells the rules apart: the released Qwen rules (h and w from the block start), and
    mrope's older reset rule with the ``max+1`` advance, differ from MRoPE-I wherever an image or frame
    is more than one token; a VideoRoPE stride of 1 differs wherever a video has two frames."""
    prompt = _prompt(seed)
    scheme = get_family("mrope-interleave").rules
    want, _ = _reference(
        "mrope-interleave", mrope.build_positions(prompt, rules=scheme, tokenizer=_tokenizer), scheme
    )
    for wrong in (scheme.replace(spatial="offset", advance="max+1"), scheme.replace(advance="max+1")):
        got = mrope.build_positions(prompt, rules=wrong, tokenizer=_tokenizer)
        assert got.ids.shape != want.shape or not np.array_equal(got.ids, want.numpy())
    video = get_family("videorope").rules
    pos = mrope.build_positions(prompt, rules=video.replace(temporal_stride=1))
    ref, _ = _reference("videorope", pos, video)
    if any(isinstance(s, mrope.Video) and s.grid[0] > 1 for s in prompt):
        assert not np.array_equal(pos.ids, ref.numpy())


@pytest.mark.parametrize("stride", [1.5, 0.75, 0.5, 0.3])
def test_videorope_fractional_strides_give_float_positions(stride) -> None:
    """VideoRoPE's ``scale_factor`` is a float in the authors' code (float32 positions): a stride that is
    not a whole number gives float32 positions from the builder and from token ids, and float deltas.
    Exact where the stride is a multiple of a power of two (every sum is then exact in float32); 0.3
    within one float32 ulp, as mrope adds in float64 and rounds once where the authors round each sum."""
    rules = get_family("videorope").rules.replace(temporal_stride=stride)
    assert rules.fractional_time
    exact = float(stride * 4).is_integer()
    for seed in SEEDS:
        pos = mrope.build_positions(_prompt(seed), rules=rules)
        want, delta = _reference("videorope", pos, rules, scale_factor=stride)
        got, deltas = rope_index_of(pos, rules=rules)
        assert pos.ids.dtype == np.float32 and got.dtype == torch.float32
        for ids in (pos.ids, got[:, 0].numpy()):
            if exact:
                np.testing.assert_array_equal(ids, want.numpy())
            else:
                np.testing.assert_array_max_ulp(ids, want.numpy(), maxulp=1)
        assert pos.delta == pytest.approx(delta, abs=1e-5) and deltas.tolist() == [[pos.delta]]


def test_stride_refusals() -> None:
    with pytest.raises(mrope.MRopeError, match="temporal_stride must be a finite number > 0"):
        get_family("videorope").rules.replace(temporal_stride=0)
    with pytest.raises(mrope.MRopeError, match="'seconds' rule takes only 1"):
        get_family("qwen2.5-vl").rules.replace(temporal_stride=2)


# ------------------------------------------------------------------------ the authors' rotation


def _inv_freq(theta: float, dim: int = 128) -> torch.Tensor:
    """multimodal_ropes/freq_allocation/vanilla.py:49-56 (the ``default`` rope type)."""
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim
    return torch.pow(torch.tensor(theta, dtype=torch.float), exponents).reciprocal()


def _freqs(positions: torch.Tensor, theta: float) -> torch.Tensor:
    """freq_allocation/mrope.py:22-40 (and Qwen2VLRotaryEmbedding, modeling_videorope.py:176-183):
    ``[3, 1, T, dim / 2]`` angles in fp32."""
    pos = positions[:, None, :]
    inv = _inv_freq(theta)[None, None, :, None].float().expand(3, 1, -1, 1)
    return (inv @ pos[:, :, None, :].float()).transpose(2, 3)


def mrope_interleave_cos_sin(positions, theta, section=(24, 20, 20)):
    """freq_allocation/mrope_i.py:19-24 then mrope.py:44-46: ``[T, 128]`` cos and sin."""
    freqs = _freqs(positions, theta)
    freqs_t = freqs[0].clone()
    for dim, offset in enumerate((1, 2), start=1):
        idx = slice(offset, section[dim] * 3, 3)
        freqs_t[..., idx] = freqs[dim, ..., idx]
    emb = torch.cat((freqs_t, freqs_t), dim=-1)[0]
    return emb.cos(), emb.sin()


def mhrope_cos_sin(positions, theta, section=(2, 3, 3), kv_heads=8):
    """freq_allocation/mhrope.py:20-44 then mrope.py:44-46: ``[T, kv_heads, 128]`` cos and sin."""
    freqs = _freqs(positions, theta)
    batch_size, seq_length, dim = freqs.shape[1:]
    freqs = torch.cat([freqs[m, :, None, :, :].repeat(1, num, 1, 1) for m, num in enumerate(section)], dim=1)
    if sum(section) < kv_heads:
        freqs = torch.cat([freqs, torch.zeros(batch_size, kv_heads - sum(section), seq_length, dim)], dim=1)
    emb = torch.cat((freqs, freqs), dim=-1)[0]  # [kv_heads, T, 128]
    return emb.cos().transpose(0, 1), emb.sin().transpose(0, 1)


def videorope_cos_sin(positions, theta, section=(16, 24, 24), nope_t: bool = False):
    """modeling_videorope.py:176-183 (cos / sin of every axis) then
    ``apply_m_modify_multimodal_rotary_pos_emb`` :258-281 (h / w alternating, then t): ``[T, 128]``.
    ``nope_t``: HoPE's ``apply_hybrid_multimodal_rotary_pos_emb`` (hrlics/HoPE at 85b76c0,
    modeling_hope.py:266-293), this loop with the t sections ones and zeros (:285-288)."""
    freqs = _freqs(positions, theta)
    emb = torch.cat((freqs, freqs), dim=-1)[:, 0]
    cos, sin = emb.cos(), emb.sin()
    mrope_section = [section[0], section[1] + section[2]] * 2
    mrope_section = mrope_section[::-1]
    index, result_cos, result_sin = 0, [], []
    for i, sec in enumerate(mrope_section):
        if i % 2 == 0:
            for j in range(sec):
                row = 1 if j % 2 == 0 else 2
                result_cos.append(cos[row, ..., index : index + 1])
                result_sin.append(sin[row, ..., index : index + 1])
                index += 1
        elif nope_t:
            result_cos.append(torch.ones_like(cos[0, ..., index : index + sec]))
            result_sin.append(torch.zeros_like(cos[0, ..., index : index + sec]))
            index += sec
        else:
            result_cos.append(cos[0, ..., index : index + sec])
            result_sin.append(sin[0, ..., index : index + sec])
            index += sec
    return torch.cat(result_cos, dim=-1), torch.cat(result_sin, dim=-1)


def rope_index_of(pos: mrope.Positions, **kw):
    """``mrope.get_rope_index`` on one prompt's token ids and grids (a batch of one): ``(positions
    [A, 1, T], deltas [1, 1])``, the token-id interface reading back what the builder built."""
    return mrope.get_rope_index(
        torch.from_numpy(pos.input_ids)[None],
        image_grid_thw=torch.from_numpy(pos.image_grid_thw),
        video_grid_thw=torch.from_numpy(pos.video_grid_thw),
        **kw,
    )


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def assert_rotates_as(positions, source, cos, sin, backend: str, *, heads=(4, 2), seed: int = 0) -> None:
    """Random fp32 q ``[T, heads[0], D]`` and k ``[T, heads[1], D]`` rotated by ``mrope.apply_mrope`` with
    ``source`` (a spec or a pair table) equal ``x * cos + rotate_half(x) * sin`` within 1e-5, for the
    reference's one ``[T, D]`` cos / sin table on every head."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(positions.shape[1], heads[0], cos.shape[-1], generator=gen)
    k = torch.randn(positions.shape[1], heads[1], cos.shape[-1], generator=gen)
    qr, kr = mrope.apply_mrope(q, k, positions, source, backend=backend)
    torch.testing.assert_close(qr, q * cos[:, None] + _rotate_half(q) * sin[:, None], atol=1e-5, rtol=0)
    torch.testing.assert_close(kr, k * cos[:, None] + _rotate_half(k) * sin[:, None], atol=1e-5, rtol=0)


COS_SIN = {
    "mrope-interleave": mrope_interleave_cos_sin,
    "mhrope": mhrope_cos_sin,
    "videorope": videorope_cos_sin,
}


def _check_rotation(name: str, positions: torch.Tensor, seed: int, backend: str) -> None:
    """Rotated q, k (16 query heads over 8 key heads, fp32) equal the authors' rotation within 1e-5;
    MHRoPE's query heads read their key head's, as README's ``apply_multihead_rotary_pos_emb`` repeats
    them (``repeat_interleave`` over the GQA group)."""
    spec = get_family(name).spec
    cos_k, sin_k = COS_SIN[name](positions, spec.theta)
    if cos_k.dim() == 2:  # one table for every head
        cos_k, sin_k = cos_k[:, None], sin_k[:, None]
    cos_q = cos_k.repeat_interleave(16 // cos_k.shape[1], dim=1)
    sin_q = sin_k.repeat_interleave(16 // sin_k.shape[1], dim=1)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(positions.shape[1], 16, 128, generator=gen)
    k = torch.randn(positions.shape[1], 8, 128, generator=gen)
    qr, kr = mrope.apply_mrope(q, k, positions, spec, backend=backend)
    torch.testing.assert_close(qr, q * cos_q + _rotate_half(q) * sin_q, atol=1e-5, rtol=0)
    torch.testing.assert_close(kr, k * cos_k + _rotate_half(k) * sin_k, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", list(COS_SIN))
@pytest.mark.parametrize("seed", range(4))
def test_rotation_equals_the_authors_code(name, seed) -> None:
    """cos / sin equal the authors' bit for bit, and the torch path rotates as they do."""
    spec = get_family(name).spec
    pos = mrope.build_positions(_prompt(seed), model=name, tokenizer=_tokenizer)
    positions = torch.from_numpy(pos.ids)
    cos_ref, sin_ref = COS_SIN[name](positions, spec.theta)
    cos, sin = mrope.cos_sin(positions, spec)
    torch.testing.assert_close(cos, cos_ref, atol=0, rtol=0)
    torch.testing.assert_close(sin, sin_ref, atol=0, rtol=0)
    _check_rotation(name, positions, seed, "torch")


@pytest.mark.parametrize("name", list(COS_SIN))
def test_the_triton_kernel_rotates_as_the_authors_do(name, monkeypatch) -> None:
    """The Triton kernel (interpreted on the CPU) takes each scheme's spec, MHRoPE's per-head table
    included, and rotates as the authors do."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    pos = mrope.build_positions([mrope.Text(3), mrope.Image(grid=(1, 6, 8)), mrope.Text(2)], model=name)
    _check_rotation(name, torch.from_numpy(pos.ids), 1, "triton")


def test_mhrope_padded_key_heads_as_a_pair_table() -> None:
    """Fewer axis heads than key heads (freq_allocation/mhrope.py:28-44 pads the rest with zero angles:
    NoPE) is a :class:`mrope.ops.PairTable` whose padded heads' rows are -1: cos 1 and sin 0 there, and
    the other heads as the authors' ``(2, 2, 2)`` of 8."""
    spec = RopeSpec(theta=5_000_000.0, section_layout="per_head", mrope_section=(2, 2, 2))
    table = pair_table(spec)
    padded = PairTable(
        rows=np.concatenate([table.rows, np.full((2, table.num_freqs), -1)]),
        inv_freq=np.concatenate([table.inv_freq, table.inv_freq[:2]]),
        inv_freq32=np.concatenate([table.inv_freq32, table.inv_freq32[:2]]),
        head_dim=128,
        num_rows=3,
    )
    positions = torch.from_numpy(mrope.build_positions(_prompt(5), model="mhrope", tokenizer=_tokenizer).ids)
    cos_ref, sin_ref = mhrope_cos_sin(positions, spec.theta, section=(2, 2, 2), kv_heads=8)
    cos, sin = mrope.cos_sin(positions, padded)
    torch.testing.assert_close(cos, cos_ref, atol=0, rtol=0)
    torch.testing.assert_close(sin, sin_ref, atol=0, rtol=0)
    assert bool((cos[:, 6:] == 1).all()) and not bool((cos[:, :6] == 1).all())


def test_negative_controls_of_the_rotation() -> None:
    """The rotation checks can fail: the Multimodal-RoPEs port of VideoRoPE's frequencies
    (freq_allocation/videorope.py:17-22: t at frequency 0, h odd, w even from 2) is not the official
    order, and Qwen3-VL's shared interleaved table is not MHRoPE's per-head one."""
    pos = torch.from_numpy(mrope.build_positions(_prompt(3), model="videorope").ids)
    fam = get_family("videorope")
    freqs = _freqs(pos, fam.spec.theta)
    ported = freqs[0].clone()
    for dim, offset in enumerate((1, 2), start=1):
        ported[..., slice(offset, 48, 2)] = freqs[dim, ..., slice(offset, 48, 2)]
    ported_cos = torch.cat((ported, ported), dim=-1)[0].cos()
    assert not torch.allclose(mrope.cos_sin(pos, fam.spec)[0], ported_cos, atol=1e-3)
    mh = get_family("mhrope")
    shared = get_family("mrope-interleave").spec
    cos_ref, _ = mhrope_cos_sin(pos, mh.spec.theta)
    assert not torch.allclose(mrope.cos_sin(pos, shared)[0][:, None].expand_as(cos_ref), cos_ref, atol=1e-3)


# ------------------------------------------------------------------------ by name, through the faces


def test_schemes_are_named_apart_from_the_families() -> None:
    assert {"mrope-interleave", "mhrope", "videorope"} <= set(SCHEME_NAMES)
    assert not set(SCHEME_NAMES) & set(mrope.models.names())
    assert get_family("MRoPE-I") is get_family("mrope-interleave")
    assert mrope.models.schemes() == tuple(get_family(n) for n in SCHEME_NAMES)
    with pytest.raises(mrope.MRopeError, match="research scheme"):
        get_family("videorope2")


def test_mhrope_needs_a_multiple_of_its_key_heads() -> None:
    spec = get_family("mhrope").spec
    q, k = torch.randn(5, 12, 128), torch.randn(5, 6, 128)
    with pytest.raises(mrope.MRopeError, match="multiple of 8"):
        mrope.apply_mrope(q, k, torch.zeros(3, 5, dtype=torch.int64), spec)


@pytest.mark.parametrize("name", ["videorope", "mrope-interleave"])
def test_cli_positions_by_name(name, tmp_path, capsys) -> None:
    out = tmp_path / "p.npy"
    args = ["positions", "--model", name, "--text", "3", "--image-grid", "1,6,8", "--text", "2"]
    args += ["--video-grid", "3,4,6", "--no-wrap", "--text", "2", "--out", str(out)]
    assert main(args) == 0
    capsys.readouterr()
    segs = [mrope.Text(3), mrope.Image(grid=(1, 6, 8)), mrope.Text(2)]
    segs += [mrope.Video(grid=(3, 4, 6), wrap=False), mrope.Text(2)]
    pos = mrope.build_positions(segs, model=name)
    np.testing.assert_array_equal(np.load(out), pos.ids)


def test_packing_keeps_each_samples_scheme_positions() -> None:
    prompts = [_prompt(s) for s in range(3)]
    packed = mrope.pack(prompts, model="videorope", max_length=4096)
    for row in packed.rows:
        for k, sample in enumerate(row.samples):
            a, b = int(row.cu_seqlens[k]), int(row.cu_seqlens[k + 1])
            pos = mrope.build_positions(prompts[sample], model="videorope")
            want, delta = _reference("videorope", pos, get_family("videorope").rules)
            np.testing.assert_array_equal(row.position_ids[1:, a:b], want.numpy())
            assert int(row.deltas[k]) == delta


@pytest.mark.parametrize("name", ["mrope-interleave", "mhrope", "videorope"])  # circle-rope: its own file
def test_a_continued_turn_is_the_tail_of_the_whole_conversation(name) -> None:
    """The ``block`` and ``time`` advances resume from the last text token (not ``1 + max``): a turn
    continued after 3 decoded tokens equals the tail of the whole conversation built at once, and the
    states' deltas (conversation, turn, rewind) count from the t row under ``time``, as the builder's."""
    big = [mrope.Text(2), mrope.Image(grid=(1, 40, 40)), mrope.Text(1)]  # VideoRoPE: h reaches past t
    for first, second in [(big, _prompt(100)), *((_prompt(s), _prompt(s + 100)) for s in range(3))]:
        whole = mrope.build_positions([*first, mrope.Text(3), *second], model=name, tokenizer=_tokenizer)
        turn = mrope.continue_positions(
            mrope.build_positions(first, model=name, tokenizer=_tokenizer),
            second,
            generated=3,
            model=name,
            tokenizer=_tokenizer,
        )
        n = turn.positions.num_tokens
        np.testing.assert_array_equal(turn.positions.ids, whole.ids[:, -n:])
        # the state decodes where the whole conversation does (VideoRoPE: one past the last t)
        assert turn.state.delta == whole.delta == mrope.conversation_state(whole).delta
        # taking the turn back leaves the state of the first prompt and its 3 decoded tokens
        head = mrope.build_positions([*first, mrope.Text(3)], model=name, tokenizer=_tokenizer)
        assert mrope.rewind(whole, n) == mrope.conversation_state(head)
        assert mrope.rewind(whole, n).delta == head.delta
