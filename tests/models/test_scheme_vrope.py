"""VRoPE (``model="vrope"``) against its authors' code: four symmetric maps on four position rows.

Reference: johncaged/VRoPE at 1bb9363 (paper: Liu et al., "VRoPE: Rotary Position Embedding for Video
Large Language Models", EMNLP 2025), vrope.py, written out below on the token ids of a prompt: text is
``generate_1d_positions`` (:98-104, one position on every channel), an image or video grid is
``generate_nd_positions`` (:106-154, an image one frame, :40-42) with the channel allocation of :148-152
(``half_time_dim`` 0, :80), and decoding resumes at the counter (autoregressive mode, :88-91). That file
gives one position per frequency pair (``[T, head_dim / 2]``); the rotation of such positions is Qwen2's
(transformers 5.24 models/qwen2/modeling_qwen2.py:84 ``inv_freq``, :89-90 ``freqs``, ``cat((freqs,
freqs))``), written out here per pair. mrope's four rows and its spec's axis map (pair ``p`` on row
``p % 4``) must give the authors' per-pair positions exactly on random prompts, through every face that
carries four rows; the faces that cannot refuse, naming the rules and the row count.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from test_schemes import assert_rotates_as, rope_index_of

import mrope
from mrope._cli import main
from mrope.models import get_family
from mrope.ops import PairTable, pair_table
from mrope.packing import shard, shard_samples

SEEDS = range(12)
FAMILY = get_family("vrope")
RULES, SPEC = FAMILY.rules, FAMILY.spec


def _prompt(seed: int) -> list[mrope.Segment]:
    """Random text, images and videos (encoder grids, merge 2; odd and even LLM sides, 1 to 4 frames)."""
    rng = np.random.default_rng(1000 + seed)
    segs: list[mrope.Segment] = [mrope.Text(int(rng.integers(1, 7)))]
    for _ in range(int(rng.integers(1, 5))):
        h, w = 2 * int(rng.integers(1, 8)), 2 * int(rng.integers(1, 8))
        if rng.random() < 0.5:
            segs.append(mrope.Image(grid=(1, h, w)))
        else:
            segs.append(mrope.Video(grid=(2 * int(rng.integers(1, 5)), h, w), second_per_grid=1.0))
        segs.append(mrope.Text(int(rng.integers(1, 7))))
    return segs


# ------------------------------------------------------------------------ the authors' positions


def _grid_positions(
    index: int, t: int, h: int, w: int, half: int, step: int | None = None
) -> tuple[torch.Tensor, int]:
    """vrope.py:106-154 for ``data_shape (t, h, w)``: ``[t h w, half]`` positions and the next index
    (``step``: another frame step, for the negative control)."""
    span = h + w - 1 if step is None else step  # :115, the indexes one frame uses
    row = torch.arange(h).view(h, 1).expand(h, w).flatten()  # :121-124, x = 0
    col = torch.arange(w).view(1, w).expand(h, w).flatten()  # x = 1
    hs = torch.stack([row, (h - 1) - row]).view(2, 1, h * w)  # :128-134: plain, then flipped (dim 1)
    ws = torch.stack([col, (w - 1) - col]).view(1, 2, h * w)
    maps = (hs + ws).reshape(4, h * w)  # :138, the sum broadcast over the two pairs
    frames = maps[None] + (torch.arange(t) * span)[:, None, None]  # :141-142, [t, 4, h w]
    rows = frames.permute(1, 0, 2).flatten(start_dim=1) + index  # :147, [4, t h w]
    per_pair = torch.stack([rows[p % rows.shape[0]] for p in range(half)], dim=-1)  # :150
    return per_pair, index + span * t  # :153


def vrope_reference(
    input_ids: np.ndarray,
    image_grid: np.ndarray,
    video_grid: np.ndarray,
    half: int = 64,
    qwen_step: bool = False,
) -> tuple[torch.Tensor, int]:
    """The authors' per-pair positions ``[T, half]`` of a prompt's token ids and its decode delta: runs of
    Qwen2-VL's image / video pads are their grids' shapes (merged by 2), every other token text.
    ``qwen_step``: frames stepped by ``max(H', W')`` instead (a negative control)."""
    tokens = [int(x) for x in input_ids]
    grids = {RULES.image_pad_id: iter(image_grid.tolist()), RULES.video_pad_id: iter(video_grid.tolist())}
    merge = RULES.merge_size
    index, parts, a = 0, [], 0
    while a < len(tokens):
        if tokens[a] in grids:
            t, h, w = next(grids[tokens[a]])
            hh, ww = h // merge, w // merge
            ids, index = _grid_positions(index, t, hh, ww, half, max(hh, ww) if qwen_step else None)
            parts.append(ids)
            a += ids.shape[0]
            continue
        z = a
        while z < len(tokens) and tokens[z] not in grids:
            z += 1
        parts.append(torch.arange(index, index + z - a).unsqueeze(-1).expand(-1, half))  # :102
        index, a = index + z - a, z  # :103
    return torch.cat(parts), index - len(tokens)  # decode (:88-91) takes ``index`` next


def _reference_of(pos: mrope.Positions) -> tuple[torch.Tensor, int]:
    return vrope_reference(pos.input_ids, pos.image_grid_thw, pos.video_grid_thw)


def _per_pair(ids: np.ndarray) -> np.ndarray:
    """mrope's rows read per pair by the spec's axis map: ``[T, 64]``."""
    return np.asarray(ids)[SPEC.axis_map()].T


@pytest.mark.parametrize("seed", SEEDS)
def test_positions_equal_the_authors_code(seed) -> None:
    pos = mrope.build_positions(_prompt(seed), model="vrope")
    want, delta = _reference_of(pos)
    assert pos.ids.shape == (4, pos.num_tokens) and pos.ids.dtype == np.int64
    np.testing.assert_array_equal(_per_pair(pos.ids), want.numpy())
    np.testing.assert_array_equal(pos.ids, want[:, :4].numpy().T)  # the four maps, in the authors' order
    assert pos.delta == delta
    got, deltas = rope_index_of(pos, model="vrope")
    assert got.shape == (4, 1, pos.num_tokens)
    np.testing.assert_array_equal(_per_pair(got[:, 0].numpy()), want.numpy())
    assert deltas.tolist() == [[delta]]


@pytest.mark.parametrize("seed", range(4))
def test_the_rules_on_another_family(seed) -> None:
    """Qwen2.5-VL with VRoPE's rules (its ids are Qwen2-VL's): the same positions as the scheme, the
    video's seconds unread (frames follow one another, as the authors' code has no time delta, :140)."""
    rules = {"spatial": "symmetric", "num_axes": 4}
    pos = mrope.build_positions(_prompt(seed), model="qwen2.5-vl", rules=rules)
    want, delta = _reference_of(pos)
    np.testing.assert_array_equal(_per_pair(pos.ids), want.numpy())
    assert pos.delta == delta


def test_batch_rows_equal_the_authors_code() -> None:
    prompts = [_prompt(s) for s in range(4)]
    batch = mrope.build_batch(prompts, model="vrope")
    assert batch.ids.shape[0] == 4
    for row, prompt in enumerate(prompts):
        want, delta = _reference_of(mrope.build_positions(prompt, model="vrope"))
        valid = batch.attention_mask[row].astype(bool)
        np.testing.assert_array_equal(_per_pair(batch.ids[:, row][:, valid]), want.numpy())
        assert int(batch.deltas[row]) == delta


@pytest.mark.parametrize("seed", [None, *range(4)])
def test_negative_controls_of_the_positions(seed) -> None:
    """The reference tells the maps apart: rows in another order (the h and w mirrors swapped) differ
    from it wherever a grid is not square, and frames stepped by Qwen's ``max(H', W')`` instead of
    ``H' + W' - 1`` wherever a video has two frames of more than one token; so do Qwen2-VL's rows."""
    prompt = (
        _prompt(seed) if seed is not None else [mrope.Text(2), mrope.Video(grid=(8, 6, 10)), mrope.Text(1)]
    )
    pos = mrope.build_positions(prompt, model="vrope")
    want, _ = _reference_of(pos)
    grids = np.concatenate([pos.image_grid_thw, pos.video_grid_thw])
    if (grids[:, 1] != grids[:, 2]).any():
        assert not np.array_equal(_per_pair(pos.ids[[0, 2, 1, 3]]), want.numpy())
    stepped, _ = vrope_reference(pos.input_ids, pos.image_grid_thw, pos.video_grid_thw, qwen_step=True)
    if ((pos.video_grid_thw[:, 0] > 2) & (pos.video_grid_thw[:, 1:].prod(axis=1) > 4)).any():
        assert not np.array_equal(_per_pair(pos.ids), stepped.numpy())
    qwen = mrope.build_positions(prompt, model="qwen2-vl")
    assert not np.array_equal(np.asarray(qwen.ids)[np.arange(64) % 3].T, want.numpy())


# ------------------------------------------------------------------------ the authors' rotation


def _cos_sin_reference(
    per_pair: torch.Tensor, theta: float, dim: int = 128
) -> tuple[torch.Tensor, torch.Tensor]:
    """modeling_qwen2.py:84 and :89-90 with one position per pair: ``[T, dim]`` cos and sin (fp32)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
    freqs = per_pair.float() * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


@pytest.mark.parametrize("seed", range(4))
def test_rotation_equals_the_authors_code(seed) -> None:
    """cos / sin of the four rows through the spec's pair table equal the per-pair reference bit for bit;
    the torch path rotates q and k as it does."""
    pos = mrope.build_positions(_prompt(seed), model="vrope")
    want, _ = _reference_of(pos)
    cos_ref, sin_ref = _cos_sin_reference(want, SPEC.theta)
    positions = torch.from_numpy(pos.ids)
    cos, sin = mrope.cos_sin(positions, SPEC)
    torch.testing.assert_close(cos, cos_ref, atol=0, rtol=0)
    torch.testing.assert_close(sin, sin_ref, atol=0, rtol=0)
    assert_rotates_as(positions, SPEC, cos_ref, sin_ref, "torch", seed=7)


def test_the_triton_kernel_rotates_four_rows_as_the_authors_do(monkeypatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    pos = mrope.build_positions([mrope.Text(3), mrope.Video(grid=(4, 6, 8)), mrope.Text(2)], model="vrope")
    want, _ = _reference_of(pos)
    cos, sin = _cos_sin_reference(want, SPEC.theta)
    assert_rotates_as(torch.from_numpy(pos.ids), SPEC, cos, sin, "triton", seed=7)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_a_pair_table_of_five_rows(backend, monkeypatch) -> None:
    """A :class:`PairTable` whose pair ``p`` reads row ``p % 5`` of ``[5, T]`` positions (rows any R), by the
    reference rotation of those per-pair positions; the same positions read as four rows differ."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    base = pair_table(SPEC)
    rows = np.arange(64) % 5
    table = PairTable(rows=rows, inv_freq=base.inv_freq, inv_freq32=base.inv_freq32, head_dim=128, num_rows=5)
    positions = torch.from_numpy(np.random.default_rng(3).integers(0, 5000, size=(5, 37)))
    cos, sin = _cos_sin_reference(positions[torch.from_numpy(rows)].T, SPEC.theta)
    got_cos, got_sin = mrope.cos_sin(positions, table)
    torch.testing.assert_close(got_cos, cos, atol=0, rtol=0)
    torch.testing.assert_close(got_sin, sin, atol=0, rtol=0)
    assert_rotates_as(positions, table, cos, sin, backend, seed=7)
    assert not torch.allclose(mrope.cos_sin(positions[:4], SPEC)[0], cos, atol=1e-3)  # negative control
    with pytest.raises(mrope.ApplyError, match=r"\[5, T\]"):
        mrope.cos_sin(positions[:4], table)


def test_negative_control_of_the_rotation() -> None:
    """Chunked sections of the same sizes (pairs 0-15 on row 0, ...) are not the authors' ``p % 4``."""
    pos = mrope.build_positions(_prompt(1), model="vrope")
    want, _ = _reference_of(pos)
    chunked = mrope.RopeSpec.from_dict({**SPEC.to_dict(), "section_layout": "chunked"})
    cos_ref, _ = _cos_sin_reference(want, SPEC.theta)
    assert not torch.allclose(mrope.cos_sin(torch.from_numpy(pos.ids), chunked)[0], cos_ref, atol=1e-3)


# ------------------------------------------------------------------------ the faces that carry four rows


@pytest.mark.parametrize("seed", range(4))
def test_a_continued_turn_is_the_tail_of_the_whole_conversation(seed) -> None:
    first, second = _prompt(seed), _prompt(seed + 100)
    whole = mrope.build_positions([*first, mrope.Text(3), *second], model="vrope")
    turn = mrope.continue_positions(
        mrope.build_positions(first, model="vrope"), second, generated=3, model="vrope"
    )
    n = turn.positions.num_tokens
    np.testing.assert_array_equal(turn.positions.ids, whole.ids[:, -n:])
    assert turn.state.delta == whole.delta == mrope.conversation_state(whole).delta
    head = mrope.build_positions([*first, mrope.Text(3)], model="vrope")
    assert mrope.rewind(whole, n) == mrope.conversation_state(head)


def test_a_live_video_arrives_as_the_whole_video_gives_it() -> None:
    start = mrope.build_positions([mrope.Text(3)], model="vrope")
    video = mrope.Video(grid=(8, 6, 10), second_per_grid=1.0)
    whole = mrope.build_positions([mrope.Text(3), video], model="vrope")
    got, arrived = [], 0
    for groups in (2, 6, 8):
        part = mrope.Video(grid=(groups, 6, 10), second_per_grid=1.0)
        chunk = mrope.live_video_chunk(start, part, arrived, final=groups == 8, model="vrope")
        got.append(chunk.ids)
        arrived = groups
    np.testing.assert_array_equal(np.concatenate(got, axis=1), whole.ids[:, 3:])
    assert chunk.state == mrope.conversation_state(whole)


def test_packing_and_its_rank_shards_keep_each_samples_positions() -> None:
    """Packed rows hold each sample's four rows (row 0 of ``position_ids`` is the sample index); a
    rank's shard built from the samples equals the packed row's (VRoPE's samples are built whole and
    cut: the piece table evaluates three rows only)."""
    prompts = [_prompt(s) for s in range(3)]
    (row,) = list(mrope.pack(prompts, model="vrope", max_length=8192, mode="stream"))
    assert row.position_ids.shape[0] == 5
    for k, sample in enumerate(row.samples):
        a, b = int(row.cu_seqlens[k]), int(row.cu_seqlens[k + 1])
        want, delta = _reference_of(mrope.build_positions(prompts[sample], model="vrope"))
        np.testing.assert_array_equal(_per_pair(row.position_ids[1:, a:b]), want.numpy())
        assert int(row.deltas[k]) == delta
    for layout in ("zigzag", "contiguous"):
        for rank in range(2):
            got = shard_samples(prompts, model="vrope", world_size=2, rank=rank, layout=layout)
            want_shard = shard(row, world_size=2, rank=rank, layout=layout)
            np.testing.assert_array_equal(got["position_ids"], want_shard.position_ids)


def test_programs_carry_four_rows() -> None:
    pos = mrope.build_positions(_prompt(2), model="vrope")
    program = pos.program()
    assert program.num_axes == 4
    np.testing.assert_array_equal(program.expand(), pos.ids)
    again = mrope.PositionProgram.from_bytes(program.to_bytes())
    np.testing.assert_array_equal(again.expand(), pos.ids)
    np.testing.assert_array_equal(mrope.PositionProgram.from_dict(program.to_dict()).expand(), pos.ids)


def test_service_json_npy_and_program_answers() -> None:
    from fastapi.testclient import TestClient

    from mrope.service import Settings
    from mrope.service.app import create_app

    segments = [
        {"type": "text", "tokens": 4},
        {"type": "image", "grid": [1, 6, 10]},
        {"type": "text", "tokens": 2},
        {"type": "video", "grid": [4, 8, 6], "second_per_grid": 1.0},
    ]
    pos = mrope.build_positions(
        [
            mrope.Text(4),
            mrope.Image(grid=(1, 6, 10)),
            mrope.Text(2),
            mrope.Video(grid=(4, 8, 6), second_per_grid=1.0),
        ],
        model="vrope",
    )
    want, delta = _reference_of(pos)
    body = {"model": "vrope", "segments": segments}
    with TestClient(create_app(Settings())) as client:
        answer = client.post("/v1/positions", json=body).json()
        np.testing.assert_array_equal(_per_pair(np.asarray(answer["positions"])), want.numpy())
        assert answer["delta"] == delta
        npy = client.post("/v1/positions", json=body, headers={"accept": "application/x-npy"})
        np.testing.assert_array_equal(np.load(io.BytesIO(npy.content)), pos.ids)
        program = client.post("/v1/positions", json=body, headers={"accept": "application/x-mrope-program"})
        np.testing.assert_array_equal(mrope.PositionProgram.from_bytes(program.content).expand(), pos.ids)
        index = {"model": "vrope", "input_ids": [pos.input_ids.tolist()]}
        index |= {
            "image_grid_thw": pos.image_grid_thw.tolist(),
            "video_grid_thw": pos.video_grid_thw.tolist(),
        }
        got = np.asarray(client.post("/v1/rope-index", json=index).json()["position_ids"])
        np.testing.assert_array_equal(got[:, 0], pos.ids)


def test_cli_writes_four_rows_and_shows_each(tmp_path, capsys) -> None:
    out = tmp_path / "p.npy"
    args = ["positions", "--model", "vrope", "--text", "3", "--image-grid", "1,6,8", "--text", "2"]
    assert main([*args, "--out", str(out)]) == 0
    pos = mrope.build_positions([mrope.Text(3), mrope.Image(grid=(1, 6, 8)), mrope.Text(2)], model="vrope")
    np.testing.assert_array_equal(np.load(out), pos.ids)
    table = capsys.readouterr().out
    header = next(line for line in table.splitlines() if line.startswith("seg"))
    assert header.split()[4:8] == ["r0", "r1", "r2", "r3"]
    image = next(line for line in table.splitlines() if " image " in line)
    # the block 4..9 of each map: a 3 x 4 grid at 4 spans 4 + (3 + 4 - 2) on every row
    assert image.split()[5:9] == ["4..9"] * 4
    assert main(["positions", "--model", "qwen2-vl", *args[3:]]) == 0  # three rows keep t, h, w
    assert next(x for x in capsys.readouterr().out.splitlines() if x.startswith("seg")).split()[4:7] == [
        "t",
        "h",
        "w",
    ]


def test_pipeline_records_carry_four_rows() -> None:
    from mrope import pipeline

    record = {
        "model": "vrope",
        "segments": [{"type": "text", "tokens": 3}, {"type": "image", "grid": [1, 4, 6]}],
    }
    got = pipeline.process_record(record)
    pos = mrope.build_positions([mrope.Text(3), mrope.Image(grid=(1, 4, 6))], model="vrope")
    np.testing.assert_array_equal(np.asarray(got["positions"]), pos.ids)


# ------------------------------------------------------------------------ refusals


def test_plot_refuses_four_rows_and_the_kit_scores_them() -> None:
    """The picture draws rows as t, h and w and refuses four; the invariance kit scores q.k on every row
    the positions have, so a translation (the same shift on all four rows, as VRoPE's text moves every
    row alike) keeps every score."""
    pos = mrope.build_positions([mrope.Text(2), mrope.Image(grid=(1, 4, 6))], model="vrope")
    from mrope._plot import render_layout

    with pytest.raises(mrope.LayoutError, match="three position rows.*'vrope' rules write 4 rows"):
        render_layout(pos)
    from mrope.testing import assert_translation_invariant

    assert_translation_invariant(pos, SPEC)  # the kit's own tests hold its failing cases
    assert_translation_invariant(pos, SPEC, shift=(5, 0, 0, 7))  # a constant per row: differences kept


def test_rules_refusals() -> None:
    with pytest.raises(mrope.LayoutError, match="'symmetric'.*needs num_axes=4.*got num_axes=3"):
        RULES.replace(num_axes=3)
    with pytest.raises(mrope.LayoutError, match="got advance='time', temporal_stride=2"):
        RULES.replace(advance="time", temporal_stride=2)
    with pytest.raises(
        mrope.LayoutError, match="num_axes 4 needs positions_base='sequence' or spatial='symmetric'"
    ):
        get_family("qwen2-vl").rules.replace(num_axes=4)
    with pytest.raises(mrope.LayoutError, match="tiles are not supported under the 'vrope' rules"):
        mrope.build_positions([mrope.Image(grid=(1, 8, 8), tiles=(2, 2))], model="vrope")
