"""TAD-RoPE against the code that runs it: Wiselnn570/VideoRoPE at 7712ca3,
videorope-transformer/modeling_videorope.py (the same functions as hrlics/HoPE's modeling_hope.py at
85b76c0, :1663-1765 and :1888-1989). TAD-RoPE is TC-LLaVA's (Gao et al., arXiv 2409.03206); its own code
was not found, so the reference is this port, written out below.

mrope's positions for the scheme are the authors' halves and its spec doubles every frequency
(``mrope.models._schemes.tad_rope``): the checks compare twice mrope's positions with the authors', and
cos / sin (the angles) bit for bit. Each check has a negative control.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_schemes import _blocks, _freqs, _ids, _prompt, _rotate_half, _tokenizer, rope_index_of

import mrope
from mrope._cli import main
from mrope.models import get_family

SEEDS = range(12)


def tad_index(input_ids, image_grid, video_grid, ids):
    """``get_time_rope_index`` (modeling_videorope.py:1732-1833) plus ``get_vanilla_rope_index``
    (:1628-1729), summed as at :2108-2115: ``[3, T]`` int64 positions and the time index's delta, which
    decoding adds to ``2 * cache_position`` (:2230-2233). Both write three equal rows
    (``torch.stack([t_index, t_index, t_index])``, :1801), so one row is written here and repeated. The
    vanilla index is the token's index in the sequence: its text and vision runs each continue from the
    last one's largest + 1 (:1692-1704)."""
    tokens = [int(x) for x in input_ids]
    time: list[torch.Tensor] = []  # runs of the time index, text then vision, block by block
    walk = _blocks(tokens, ids, image_grid, torch.as_tensor(video_grid).reshape(-1, 3))
    block, st = next(walk), 0
    while block is not None:
        text_len, (frames, rows, cols), ed = block
        start = int(time[-1].max()) + 1 if time else 0  # st_idx: the largest so far + 1
        time.append(torch.arange(text_len) + start)
        time.append(torch.arange(frames).repeat_interleave(rows * cols) + text_len + start)  # frame index
        st = ed + frames * rows * cols
        block = walk.send(st)
    if st < len(tokens):
        time.append(torch.arange(len(tokens) - st) + (int(time[-1].max()) + 1 if time else 0))
    row = torch.cat(time) + torch.arange(len(tokens))  # plus the vanilla index
    return row.expand(3, -1), int(torch.cat(time).max() + 1 - len(tokens))


def _reference(pos: mrope.Positions):
    rules = get_family("tad-rope").rules
    return tad_index(pos.input_ids, pos.image_grid_thw, pos.video_grid_thw, _ids(rules))


def qwen2_vl_cos_sin(positions: torch.Tensor, theta: float, section=(16, 24, 24)):
    """Qwen2VLRotaryEmbedding (modeling_videorope.py:176-183) then ``apply_multimodal_rotary_pos_emb``'s
    chunked selection (:245-250): ``[T, 128]`` cos and sin."""
    freqs = _freqs(positions, theta)
    emb = torch.cat((freqs, freqs), dim=-1)[:, 0]
    cos, sin = emb.cos(), emb.sin()
    split = list(section) * 2
    pick = [m[i % 3] for i, m in enumerate(cos.split(split, dim=-1))]
    return torch.cat(pick, dim=-1), torch.cat(
        [m[i % 3] for i, m in enumerate(sin.split(split, dim=-1))], dim=-1
    )


# ------------------------------------------------------------------------ positions


@pytest.mark.parametrize("seed", SEEDS)
def test_positions_are_half_the_authors(seed) -> None:
    """Builder and token ids: float32 halves of the authors' positions, exactly; the delta is half
    theirs, so one position per decoded token (``cache_position + delta``) is half their
    ``2 * cache_position + delta``."""
    pos = mrope.build_positions(_prompt(seed), model="tad-rope", tokenizer=_tokenizer)
    want, delta = _reference(pos)
    assert pos.ids.dtype == np.float32
    np.testing.assert_array_equal(2 * pos.ids, want.numpy())
    assert 2 * pos.delta == delta
    got, deltas = rope_index_of(pos, model="tad-rope")
    np.testing.assert_array_equal(got[:, 0].numpy(), pos.ids)
    assert deltas.tolist() == [[pos.delta]]


def test_negative_controls_of_the_positions() -> None:
    """Without the time index (the sequence index alone, Qwen2-VL's text rule) or with M-RoPE's layout
    the reference differs wherever a prompt has a vision block."""
    for seed in SEEDS:
        pos = mrope.build_positions(_prompt(seed), model="tad-rope", tokenizer=_tokenizer)
        want, _ = _reference(pos)
        assert not np.array_equal(2 * np.arange(pos.num_tokens), want[0].numpy())
        qwen = mrope.build_positions(_prompt(seed), model="qwen2-vl", tokenizer=_tokenizer)
        assert not np.array_equal(2 * qwen.ids, want.numpy())


def test_batch_packing_and_continuation() -> None:
    prompts = [_prompt(s) for s in range(4)]
    batch = mrope.build_batch(prompts, model="tad-rope", tokenizer=_tokenizer)
    for row, prompt in enumerate(prompts):
        pos = mrope.build_positions(prompt, model="tad-rope", tokenizer=_tokenizer)
        valid = batch.attention_mask[row].astype(bool)
        np.testing.assert_array_equal(2 * batch.ids[:, row][:, valid], _reference(pos)[0].numpy())
    packed = mrope.pack(prompts[:3], model="tad-rope", max_length=4096)
    for row in packed.rows:
        for k, sample in enumerate(row.samples):
            a, b = int(row.cu_seqlens[k]), int(row.cu_seqlens[k + 1])
            want, delta = _reference(mrope.build_positions(prompts[sample], model="tad-rope"))
            np.testing.assert_array_equal(2 * row.position_ids[1:, a:b], want.numpy())
            assert 2 * float(row.deltas[k]) == delta
    # a turn continued after 3 decoded tokens is the tail of the whole conversation, the authors' too
    first, second = prompts[0], prompts[1]
    whole = mrope.build_positions([*first, mrope.Text(3), *second], model="tad-rope", tokenizer=_tokenizer)
    turn = mrope.continue_positions(
        mrope.build_positions(first, model="tad-rope", tokenizer=_tokenizer),
        second,
        generated=3,
        model="tad-rope",
        tokenizer=_tokenizer,
    )
    n = turn.positions.num_tokens
    np.testing.assert_array_equal(turn.positions.ids, whole.ids[:, -n:])
    np.testing.assert_array_equal(2 * whole.ids, _reference(whole)[0].numpy())


def test_cli_positions_by_name(tmp_path, capsys) -> None:
    out = tmp_path / "p.npy"
    args = ["positions", "--model", "tad-rope", "--text", "3", "--video-grid", "3,4,6", "--text", "2"]
    assert main([*args, "--out", str(out)]) == 0
    capsys.readouterr()
    pos = mrope.build_positions([mrope.Text(3), mrope.Video(grid=(3, 4, 6)), mrope.Text(2)], model="tad-rope")
    np.testing.assert_array_equal(2 * np.load(out), _reference(pos)[0].numpy())


def test_token_time_refuses_rules_it_would_ignore() -> None:
    rules = get_family("tad-rope").rules
    for change, named in [
        ({"temporal_stride": 2}, "temporal_stride 2"),
        ({"advance": "time"}, "advance 'time'"),
        ({"crop": "keep"}, "crop 'keep'"),
        ({"frame_block": True}, "frame_block True"),
    ]:
        with pytest.raises(mrope.MRopeError, match=named):
            rules.replace(**change)
    with pytest.raises(mrope.MRopeError, match="audio_pad_id"):  # the omni timeline ignores spatial
        get_family("qwen2.5-omni").rules.replace(spatial="token_time", temporal="index")


# ------------------------------------------------------------------------ rotation


def _authors_positions(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    pos = mrope.build_positions(_prompt(seed), model="tad-rope", tokenizer=_tokenizer)
    return torch.from_numpy(pos.ids), _reference(pos)[0]


@pytest.mark.parametrize("seed", range(4))
def test_angles_equal_the_authors_bit_for_bit(seed) -> None:
    """cos / sin of the halves under the scheme's doubled frequencies equal Qwen2-VL's at the authors'
    positions bit for bit; q and k rotate as theirs (torch path) within 1e-5."""
    half, theirs = _authors_positions(seed)
    spec = get_family("tad-rope").spec
    cos_ref, sin_ref = qwen2_vl_cos_sin(theirs, 1_000_000.0)
    cos, sin = mrope.cos_sin(half, spec)
    torch.testing.assert_close(cos, cos_ref, atol=0, rtol=0)
    torch.testing.assert_close(sin, sin_ref, atol=0, rtol=0)
    _check_rotation(half, theirs, spec, "torch", seed)


def _check_rotation(half, theirs, spec, backend: str, seed: int) -> None:
    cos_ref, sin_ref = (x[:, None] for x in qwen2_vl_cos_sin(theirs, 1_000_000.0))
    gen = torch.Generator().manual_seed(seed)
    q, k = (
        torch.randn(half.shape[1], 4, 128, generator=gen),
        torch.randn(half.shape[1], 2, 128, generator=gen),
    )
    qr, kr = mrope.apply_mrope(q, k, half, spec, backend=backend)
    torch.testing.assert_close(qr, q * cos_ref + _rotate_half(q) * sin_ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(kr, k * cos_ref + _rotate_half(k) * sin_ref, atol=1e-5, rtol=0)


def test_the_triton_kernel_rotates_as_the_authors_do(monkeypatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    half, theirs = _authors_positions(2)
    _check_rotation(half, theirs, get_family("tad-rope").spec, "triton", 2)


def test_negative_controls_of_the_rotation() -> None:
    """The halves under Qwen2-VL's own frequencies are not the authors' angles."""
    half, theirs = _authors_positions(1)
    cos_ref, _ = qwen2_vl_cos_sin(theirs, 1_000_000.0)
    assert not torch.allclose(mrope.cos_sin(half, get_family("qwen2-vl").spec)[0], cos_ref, atol=1e-3)
