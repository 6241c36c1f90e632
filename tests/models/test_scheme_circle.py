"""Circle-RoPE against its authors' code.

The reference below is the authors' published code written out (torch float32, one row, no padding):
lose4578/CircleRoPE at 063fb2c (paper: Wang et al., "Circle-RoPE: Cone-like Decoupled Rotary Positional
Embedding for Large Vision-Language Models", 2025), ``code/circle_rope.py`` (the circle) and
``get_rope_index`` in ``code/modular_qwen2_5_vl_circle_rope.py`` (where it is placed), with
``code/config.json``'s ``circle_rope`` values (radius 10, alpha 0.5, method circle, move_to_origin).
mrope's positions (builder, token ids, batch, packing, continuation, CLI) and rotation (``cos_sin``,
``apply_mrope``, torch and the Triton interpreter) must equal it on random prompts of text, images and
one-frame videos, and each check has a negative control.

Precision: the authors compute the circle in float32 torch (``atan2``, ``cos``, ``sin``, and a float32
basis), mrope in float64, rounded once to float32; positions agree within 1e-5 plus two float32 ulps of
their size on these prompts (the largest difference over 200 random prompts: 7.6e-6), deltas within 1e-4.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_schemes import assert_rotates_as, rope_index_of

import mrope
from mrope._cli import main
from mrope.models import get_family

SEEDS = range(12)
SCHEME_SPEC = get_family("circle-rope").spec
CONFIG = {"alpha": 0.5, "radius": 10, "method": "circle", "move_to_origin": True}  # code/config.json:10-16


def _prompt(seed: int) -> list[mrope.Segment]:
    """Random text, images and one-frame videos (encoder grids, merge 2), starting and ending with text."""
    rng = np.random.default_rng(seed)
    segs: list[mrope.Segment] = [mrope.Text(int(rng.integers(1, 6)))]
    for _ in range(int(rng.integers(1, 4))):
        h, w = 2 * int(rng.integers(1, 8)), 2 * int(rng.integers(1, 8))
        if rng.random() < 0.7:
            segs.append(mrope.Image(grid=(1, h, w)))
        else:
            segs.append(mrope.Video(grid=(1, h, w), second_per_grid=1.0))
        segs.append(mrope.Text(int(rng.integers(1, 6))))
    return segs


def segment_json(seg: mrope.Segment) -> dict:
    """A segment of :func:`_prompt` as the faces' JSON segment (a request's or a record's)."""
    if isinstance(seg, mrope.Text):
        return {"type": "text", "tokens": seg.num_tokens}
    if isinstance(seg, mrope.Image):
        return {"type": "image", "grid": list(seg.grid)}
    return {"type": "video", "grid": list(seg.grid), "second_per_grid": seg.second_per_grid}


# ------------------------------------------------------------------------ the authors' positions


def _map_to_circle(x, y, z, radius, alpha):
    """code/circle_rope.py:162-214 on one frame (``x``, ``y``, ``z`` ``[H, W]``)."""
    h, w = x.shape
    theta_orig = torch.atan2(y, x)
    theta_range = theta_orig.max() - theta_orig.min()
    if theta_range > 0:
        theta_norm = (theta_orig - theta_orig.min()) / theta_range * (2 * math.pi)
    else:
        theta_norm = theta_orig
    theta_index = torch.arange(h * w, dtype=torch.float32).reshape(h, w) / (h * w) * (2 * math.pi)
    theta = alpha * theta_norm + (1 - alpha) * theta_index
    return torch.stack([radius * torch.cos(theta), radius * torch.sin(theta), z], dim=0).unsqueeze(1)


def _rotate_plane(coord_circle, text_vector=(1, 1, 1)):
    """code/circle_rope.py:128-159 (``text_vector`` has x and y components, the else branch)."""
    text = torch.tensor(text_vector, dtype=coord_circle.dtype).float()
    text_unit = text / torch.norm(text)
    u = torch.stack([-text_unit[1], text_unit[0], torch.tensor(0.0)])
    u = u / torch.norm(u)
    v = torch.cross(text_unit, u, dim=0)
    v = v / torch.norm(v)
    return torch.stack([coord_circle[0] * u[i] + coord_circle[1] * v[i] for i in range(3)])


def circle_index(llm_grid_t, llm_grid_h, llm_grid_w, time_tensor, config=CONFIG):
    """``_get_circle_index`` (modular_qwen2_5_vl_circle_rope.py:65-73) and ``get_circle_rope_index``
    (circle_rope.py:6-64, with ``move_to_origin_coords`` :67-85): ``[3, H W]`` rows (t, h, w)."""
    t_index = time_tensor.long().view(-1, llm_grid_h, llm_grid_w)
    h_index = torch.arange(llm_grid_h).view(1, -1, 1).expand(llm_grid_t, -1, llm_grid_w)
    w_index = torch.arange(llm_grid_w).view(1, 1, -1).expand(llm_grid_t, llm_grid_h, -1)
    coords = torch.stack((w_index, h_index, t_index), dim=0)
    if config["move_to_origin"]:
        centers = (torch.amax(coords, dim=(1, 2, 3)) + torch.amin(coords, dim=(1, 2, 3))) / 2.0
        coords = coords - centers.view(-1, 1, 1, 1)
    circle = _map_to_circle(
        coords[0, 0], coords[1, 0], coords[2, 0], float(config["radius"]), config["alpha"]
    )
    out = _rotate_plane(circle)
    return torch.stack([out[2].flatten(), out[1].flatten(), out[0].flatten()])


def m_index(llm_grid_t, llm_grid_h, llm_grid_w, time_tensor):
    """``_get_m_index`` (modular_qwen2_5_vl_circle_rope.py:76-84): Qwen2.5-VL's own block."""
    t_index = time_tensor.long().flatten()
    h_index = torch.arange(llm_grid_h).view(1, -1, 1).expand(llm_grid_t, -1, llm_grid_w).flatten()
    w_index = torch.arange(llm_grid_w).view(1, 1, -1).expand(llm_grid_t, llm_grid_h, -1).flatten()
    return torch.stack([t_index, h_index, w_index])


def circle_rope_index(input_ids, image_grid, video_grid, ids, use_m_index=False, tokens_per_second=2):
    """``get_rope_index`` of modular_qwen2_5_vl_circle_rope.py:86-189 for one unpadded row (videos with
    ``second_per_grid_ts`` 1.0): float32 ``[3, T]`` positions and the delta."""
    tokens = [int(x) for x in input_ids]
    starts = [i for i, x in enumerate(tokens) if x == ids["vision_start"]]
    following = [tokens[i + 1] for i in starts]
    remain_images, remain_videos = following.count(ids["image"]), following.count(ids["video"])
    st, image_index, video_index = 0, 0, 0
    llm_pos_ids_list: list[torch.Tensor] = []
    for _ in range(remain_images + remain_videos):
        ed_image = tokens.index(ids["image"], st) if remain_images > 0 else len(tokens) + 1
        ed_video = tokens.index(ids["video"], st) if remain_videos > 0 else len(tokens) + 1
        if ed_image < ed_video:
            t, h, w = (int(v) for v in image_grid[image_index])
            second_per_grid_t, image_index, remain_images, ed = (
                0,
                image_index + 1,
                remain_images - 1,
                ed_image,
            )
        else:
            t, h, w = (int(v) for v in video_grid[video_index])
            second_per_grid_t, video_index, remain_videos, ed = (
                1.0,
                video_index + 1,
                remain_videos - 1,
                ed_video,
            )
        llm_grid_t, llm_grid_h, llm_grid_w = t, h // 2, w // 2
        text_len = ed - st
        st_idx = llm_pos_ids_list[-1].max() + 1 if llm_pos_ids_list else 0
        llm_pos_ids_list.append(torch.arange(text_len).view(1, -1).expand(3, -1) + st_idx)
        range_tensor = torch.arange(llm_grid_t).view(-1, 1)
        time_tensor = range_tensor.expand(-1, llm_grid_h * llm_grid_w) * second_per_grid_t * tokens_per_second
        index = m_index if use_m_index else circle_index
        llm_pos_ids_list.append(index(llm_grid_t, llm_grid_h, llm_grid_w, time_tensor) + text_len + st_idx)
        st = ed + llm_grid_t * llm_grid_h * llm_grid_w
    if st < len(tokens):
        st_idx = llm_pos_ids_list[-1].max() + 1 if llm_pos_ids_list else 0
        llm_pos_ids_list.append(torch.arange(len(tokens) - st).view(1, -1).expand(3, -1) + st_idx)
    llm_positions = torch.cat(llm_pos_ids_list, dim=1).reshape(3, -1).type(torch.float)
    return llm_positions, float(llm_positions.max() + 1 - len(tokens))


def _reference(pos: mrope.Positions, **kw):
    rules = get_family("circle-rope").rules
    ids = {"vision_start": rules.vision_start_id, "image": rules.image_pad_id, "video": rules.video_pad_id}
    return circle_rope_index(pos.input_ids, pos.image_grid_thw, pos.video_grid_thw, ids, **kw)


def assert_close_positions(got: np.ndarray, want: torch.Tensor) -> None:
    """Within 1e-5 plus two float32 ulps of the position's size (float64 rounded once against the
    authors' float32 steps: see the module docstring)."""
    want_np = want.numpy()
    assert got.dtype == np.float32 and got.shape == want_np.shape
    tol = 1e-5 + 2 * np.spacing(np.abs(want_np).astype(np.float32))
    assert np.all(np.abs(got.astype(np.float64) - want_np) <= tol), np.abs(got - want_np).max()


@pytest.mark.parametrize("seed", SEEDS)
def test_positions_equal_the_authors_code(seed) -> None:
    pos = mrope.build_positions(_prompt(seed), model="circle-rope")
    want, delta = _reference(pos)
    assert_close_positions(pos.ids, want)
    assert pos.delta == pytest.approx(delta, abs=1e-4)
    got, deltas = rope_index_of(pos, model="circle-rope")
    assert_close_positions(got[:, 0].numpy(), want)
    assert deltas.tolist()[0][0] == pytest.approx(delta, abs=1e-4)


def test_every_image_token_is_as_far_from_the_text_line() -> None:
    """The paper's cone (and the authors' plane orthogonal to (1, 1, 1)): each image token's rows sum to
    three times the block start, and lie at the radius from it."""
    pos = mrope.build_positions([mrope.Text(3), mrope.Image(grid=(1, 10, 14))], model="circle-rope")
    block = pos.ids[:, 4:-1].astype(np.float64) - 4.0
    np.testing.assert_allclose(block.sum(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(block, axis=0), 10.0, atol=1e-5)


def test_batch_rows_equal_the_authors_code() -> None:
    prompts = [_prompt(s) for s in range(4)]
    batch = mrope.build_batch(prompts, model="circle-rope")
    for row, prompt in enumerate(prompts):
        want, _ = _reference(mrope.build_positions(prompt, model="circle-rope"))
        valid = batch.attention_mask[row].astype(bool)
        assert_close_positions(batch.ids[:, row][:, valid], want)


def test_packing_keeps_each_samples_circle_positions() -> None:
    prompts = [_prompt(s) for s in range(3)]
    packed = mrope.pack(prompts, model="circle-rope", max_length=4096)
    for row in packed.rows:
        for k, sample in enumerate(row.samples):
            a, b = int(row.cu_seqlens[k]), int(row.cu_seqlens[k + 1])
            want, _ = _reference(mrope.build_positions(prompts[sample], model="circle-rope"))
            assert_close_positions(np.ascontiguousarray(row.position_ids[1:, a:b]), want)


def test_a_continued_turn_is_the_tail_of_the_whole_conversation() -> None:
    for s in range(3):
        first, second = _prompt(s), _prompt(s + 100)
        whole = mrope.build_positions([*first, mrope.Text(3), *second], model="circle-rope")
        turn = mrope.continue_positions(
            mrope.build_positions(first, model="circle-rope"), second, generated=3, model="circle-rope"
        )
        want, _ = _reference(whole)
        assert_close_positions(turn.positions.ids, want[:, -turn.positions.num_tokens :])
        assert turn.state.delta == pytest.approx(whole.delta, abs=1e-4)


def test_cli_positions_by_name(tmp_path, capsys) -> None:
    out = tmp_path / "p.npy"
    args = ["positions", "--model", "circle-rope", "--text", "3", "--image-grid", "1,6,8", "--text", "2"]
    assert main([*args, "--out", str(out)]) == 0
    capsys.readouterr()
    pos = mrope.build_positions(
        [mrope.Text(3), mrope.Image(grid=(1, 6, 8)), mrope.Text(2)], model="circle-rope"
    )
    np.testing.assert_array_equal(np.load(out), pos.ids)


def test_service_positions_by_name() -> None:
    """The service (same request schema) answers the library's float positions for the scheme."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from mrope.service import Settings
    from mrope.service.app import create_app

    segments = [
        {"type": "text", "tokens": 3},
        {"type": "image", "grid": [1, 6, 8]},
        {"type": "text", "tokens": 2},
    ]
    with TestClient(create_app(Settings())) as client:
        resp = client.post("/v1/positions", json={"model": "circle-rope", "segments": segments})
    assert resp.status_code == 200, resp.text
    pos = mrope.build_positions(
        [mrope.Text(3), mrope.Image(grid=(1, 6, 8)), mrope.Text(2)], model="circle-rope"
    )
    body = resp.json()  # float32 values, written as the shortest decimals that read back to them
    np.testing.assert_array_equal(np.asarray(body["positions"], dtype=np.float32), pos.ids)
    assert np.float32(body["delta"]) == np.float32(pos.delta)
    assert any(v != int(v) for v in body["positions"][0])  # negative control: real positions on the wire


@pytest.mark.parametrize("seed", SEEDS)
def test_negative_controls_of_the_positions(seed) -> None:
    """The check tells the rules apart: Qwen2.5-VL's own grid (the authors' ``use_m_index``) and the
    pure raster-index angle (``circle_alpha`` 0) are not the authors' circle."""
    prompt = _prompt(seed)
    want, _ = _reference(mrope.build_positions(prompt, model="circle-rope"))
    for wrong in ({"spatial": "offset"}, {"circle_alpha": 0.0}):
        got = mrope.build_positions(prompt, model="circle-rope", rules=wrong)
        with pytest.raises(AssertionError):
            assert_close_positions(got.ids.astype(np.float32), want)
    # and the authors' M-RoPE branch is Qwen2.5-VL's positions
    m_want, _ = _reference(mrope.build_positions(prompt, model="circle-rope"), use_m_index=True)
    qwen = mrope.build_positions(prompt, model="qwen2.5-vl")
    np.testing.assert_array_equal(qwen.ids, m_want.numpy())


def test_refusals() -> None:
    """A video of several frames has no circle layout (the authors map frame 0 only); the rule's
    numbers are checked."""
    with pytest.raises(mrope.MRopeError, match="maps one frame"):
        mrope.build_positions([mrope.Video(grid=(2, 4, 4), second_per_grid=1.0)], model="circle-rope")
    tiled = [mrope.Text(2), mrope.Image(grid=(1, 8, 8), tiles=(2, 2))]
    with pytest.raises(mrope.MRopeError, match="tiles='global'"):
        mrope.build_positions(tiled, model="circle-rope")
    # each tile its own block: its own circle (every token's rows sum to three times its block start)
    pos = mrope.build_positions(tiled, model="circle-rope", rules={"tiles": "independent"})
    for span in (s for s in pos.spans if s.kind == "image"):
        block = pos.ids[:, span.start : span.stop].astype(np.float64)
        assert block.shape[1] == 4 and np.ptp(block.sum(0)) < 1e-4 and np.ptp(block[0]) > 1
    rules = get_family("circle-rope").rules
    with pytest.raises(mrope.MRopeError, match="circle_radius"):
        rules.replace(circle_radius=0)
    with pytest.raises(mrope.MRopeError, match="circle_alpha"):
        rules.replace(circle_alpha=1.5)


# ------------------------------------------------------------------------ the authors' rotation


def qwen2_5_vl_cos_sin(positions: torch.Tensor, theta: float = 1e6, section=(16, 24, 24), dim: int = 128):
    """The rotation the authors' model keeps (Qwen2.5-VL, transformers 4.49
    modeling_qwen2_5_vl.py ``Qwen2_5_VLRotaryEmbedding.forward`` and ``apply_multimodal_rotary_pos_emb``):
    fp32 angles from the float positions, each chunk of ``section * 2`` from its axis: ``[T, 128]``."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    inv = inv_freq[None, None, :, None].float().expand(3, 1, -1, 1)
    freqs = (inv @ positions[:, None, None, :].float()).transpose(2, 3)
    emb = torch.cat((freqs, freqs), dim=-1)[:, 0]
    cos, sin = emb.cos(), emb.sin()
    split = [s for s in section * 2]
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(split, dim=-1))], dim=-1)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(split, dim=-1))], dim=-1)
    return cos, sin


@pytest.mark.parametrize("seed", range(4))
def test_rotation_equals_the_authors_code(seed) -> None:
    """On the authors' float positions cos / sin are theirs bit for bit; from mrope's own positions within
    the angle the position tolerance moves (positions below 200 here: 1e-4)."""
    spec = get_family("circle-rope").spec
    pos = mrope.build_positions(_prompt(seed), model="circle-rope")
    want, _ = _reference(pos)
    cos_ref, sin_ref = qwen2_5_vl_cos_sin(want)
    cos, sin = mrope.cos_sin(want, spec)
    torch.testing.assert_close(cos, cos_ref, atol=0, rtol=0)
    torch.testing.assert_close(sin, sin_ref, atol=0, rtol=0)
    cos, sin = mrope.cos_sin(torch.from_numpy(pos.ids), spec)
    torch.testing.assert_close(cos, cos_ref, atol=1e-4, rtol=0)
    torch.testing.assert_close(sin, sin_ref, atol=1e-4, rtol=0)
    assert_rotates_as(want, SCHEME_SPEC, *qwen2_5_vl_cos_sin(want), "torch", heads=(16, 2))
    # negative control: Qwen2.5-VL's integer grid rotates otherwise
    qwen = torch.from_numpy(mrope.build_positions(_prompt(seed), model="qwen2.5-vl").ids)
    assert not torch.allclose(mrope.cos_sin(qwen, spec)[0], cos_ref, atol=1e-2)


def test_the_triton_kernel_rotates_as_the_authors_do(monkeypatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    pos = mrope.build_positions(
        [mrope.Text(3), mrope.Image(grid=(1, 6, 8)), mrope.Text(2)], model="circle-rope"
    )
    want, _ = _reference(pos)
    assert_rotates_as(want, SCHEME_SPEC, *qwen2_5_vl_cos_sin(want), "triton", heads=(16, 2))


# ------------------------------------------------------------------------ AGE: a position set per layer

AGE_STRATEGY_4 = [True, False] * 18
"""``AGE_index_dict["strategy_4"]`` (modular_qwen2_5_vl_circle_rope.py:24-26): True, the circle index."""


def age_layer_positions(circle: torch.Tensor, m: torch.Tensor, flags=AGE_STRATEGY_4) -> list[torch.Tensor]:
    """modular_qwen2_5_vl_circle_rope.py:321-329: each layer's position ids, the circle set where its
    flag is True, else the M-RoPE set (``get_rope_index(..., use_m_index=True)``, :312-319)."""
    return [circle if flag else m for flag in flags]


@pytest.mark.parametrize("seed", range(6))
def test_age_sets_and_layers_equal_the_authors_code(seed) -> None:
    """Each set equals the authors' index of that kind, each of the 36 layers reads the set strategy 4
    gives it, and each layer's cos / sin are the rotary of its positions
    (``Qwen2_5_VLModel_AGE_mode.forward`` :439-441)."""
    family = get_family("circle-rope-age")
    sets = mrope.build_position_sets(_prompt(seed), model="circle-rope-age")
    assert list(sets) == ["circle", "mrope"]
    circle, circle_delta = _reference(sets["circle"])
    m, m_delta = _reference(sets["circle"], use_m_index=True)
    assert_close_positions(sets["circle"].ids, circle)
    np.testing.assert_array_equal(sets["mrope"].ids, m.numpy())
    assert sets["circle"].delta == pytest.approx(circle_delta, abs=1e-4) and sets["mrope"].delta == m_delta
    # the scheme's own positions (and decode delta: the authors decode every layer from it) are the circle set's
    np.testing.assert_array_equal(
        mrope.build_positions(_prompt(seed), model="circle-rope-age").ids, sets["circle"].ids
    )
    layers = family.layer_sets.for_layers(36)
    want = age_layer_positions(circle, m)
    tensors = {"circle": circle, "mrope": torch.from_numpy(sets["mrope"].ids)}
    for (cos, sin), positions in zip(mrope.layer_cos_sin(tensors, layers, family.spec), want, strict=True):
        cos_ref, sin_ref = qwen2_5_vl_cos_sin(positions)
        torch.testing.assert_close(cos, cos_ref, atol=0, rtol=0)
        torch.testing.assert_close(sin, sin_ref, atol=0, rtol=0)


def test_age_negative_control() -> None:
    """The layer check can fail: strategy 3 (circle on the last 18 layers, :21-23) puts other positions
    on the first layer than strategy 4."""
    family = get_family("circle-rope-age")
    sets = mrope.build_position_sets(_prompt(2), model="circle-rope-age")
    tensors = {name: torch.from_numpy(p.ids) for name, p in sets.items()}
    ours = mrope.layer_cos_sin(tensors, family.layer_sets.for_layers(36), family.spec)
    strategy_3 = age_layer_positions(tensors["circle"], tensors["mrope"], [False] * 18 + [True] * 18)
    assert not torch.allclose(ours[0][0], qwen2_5_vl_cos_sin(strategy_3[0])[0], atol=1e-2)


def test_a_nope_set_rotates_nothing() -> None:
    """A layer that reads ``"nope"`` (a model whose global layers have no rotary) gets cos 1 and sin 0 in
    the shape of the others; ``apply_mrope``'s own NoPE rows (a pair table's rows -1) agree."""
    family = get_family("qwen2.5-vl").replace(
        name="local-rope-global-nope",
        layer_sets=mrope.LayerSets({"rope": {}}, ("rope", "rope", "rope", "nope")),
    )
    sets = mrope.build_position_sets(
        [mrope.Text(3), mrope.Image(grid=(1, 4, 6)), mrope.Text(2)], model=family
    )
    tensors = {"rope": torch.from_numpy(sets["rope"].ids)}
    layers = family.layer_sets.for_layers(8)
    assert layers == ("rope", "rope", "rope", "nope") * 2
    tables = mrope.layer_cos_sin(tensors, layers, family.spec)
    cos, sin = tables[3]
    assert cos.shape == tables[0][0].shape and bool((cos == 1).all()) and bool((sin == 0).all())
    table = mrope.ops.pair_table(family.spec)
    nope = mrope.ops.PairTable(
        rows=np.full_like(table.rows, -1),
        inv_freq=table.inv_freq,
        inv_freq32=table.inv_freq32,
        head_dim=table.head_dim,
        num_rows=3,
    )
    torch.testing.assert_close(mrope.cos_sin(tensors["rope"], nope)[0], cos, atol=0, rtol=0)
    assert not bool((tables[0][0] == 1).all())  # negative control: a rotary layer does rotate


def test_layer_sets_refusals() -> None:
    with pytest.raises(mrope.MRopeError, match="not in sets"):
        mrope.LayerSets({"a": {}}, ("a", "b"))
    with pytest.raises(mrope.MRopeError, match="other than 'nope'"):
        mrope.LayerSets({"nope": {}}, ("nope",))
    with pytest.raises(mrope.MRopeError, match="unknown LayoutRules fields"):
        get_family("qwen2.5-vl").replace(layer_sets=mrope.LayerSets({"a": {"spatail": "reset"}}, ("a",)))
    with pytest.raises(mrope.MRopeError, match="num_layers"):
        get_family("circle-rope-age").layer_sets.for_layers(0)
    with pytest.raises(mrope.MRopeError, match="does not have"):
        mrope.layer_cos_sin(
            {"circle": torch.zeros(3, 4)}, ("circle", "mrope"), get_family("circle-rope").spec
        )
    # a model that declares no sets has one, its own
    assert get_family("qwen2.5-vl").layer_sets.for_layers(2) == ("default", "default")


def test_a_calls_rules_apply_to_every_set_before_the_sets_own() -> None:
    segs = [mrope.Text(3), mrope.Image(grid=(1, 4, 6)), mrope.Text(2)]
    sets = mrope.build_position_sets(
        segs, model="circle-rope-age", rules={"circle_radius": 4.0, "spatial": "reset"}
    )
    radius_4 = mrope.build_positions(segs, model="circle-rope", rules={"circle_radius": 4.0})
    np.testing.assert_array_equal(sets["circle"].ids, radius_4.ids)  # the set's spatial="circle" wins
    np.testing.assert_array_equal(sets["mrope"].ids, mrope.build_positions(segs, model="qwen2.5-vl").ids)
    full = mrope.build_position_sets(segs, model="circle-rope-age", rules=get_family("circle-rope").rules)
    np.testing.assert_array_equal(full["mrope"].ids, sets["mrope"].ids)
    with pytest.raises(mrope.MRopeError, match="rules must be"):
        mrope.build_position_sets(segs, model="circle-rope-age", rules=3)
