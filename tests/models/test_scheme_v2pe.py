"""V2PE (``model="v2pe"``) against its authors' code: positions, rotation and every face.

The reference is OpenGVLab/V2PE at f96f189 (paper: Ge et al., "V2PE: Improving Multimodal Long-Context
Capability of Vision-Language Models with Variable Visual Position Encoding", 2024) written out below
from internvl/model/internvl_chat/modeling_internvl_chat.py (``get_rope_pos_id``, ``v2pe_fix``) and
internvl/model/internlm2/modeling_internlm2.py (class ``V2PE``, the rotary of float positions; the
decode step of ``prepare_inputs_for_generation``). The authors run it on InternVL's ids (``<img>``,
``num_image_token * num_tile`` context tokens, ``</img>``); mrope's scheme takes Qwen2-VL's ids, so the
reference reads the vision wrappers ``<|vision_start|>`` / ``<|vision_end|>`` in their place and each
block's tokens between them as the image's ``num_image_token * num_tile`` tokens. Every check has a
negative control that shows it can fail.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from test_schemes import _rotate_half, rope_index_of

import mrope
from mrope._cli import main
from mrope.models import SCHEME_NAMES, get_family, resolve_rules
from mrope.packing import shard_samples
from mrope.service import Settings
from mrope.service.app import create_app

SEEDS = range(12)
NUM_IMAGE_TOKEN = 256
"""InternVL2's tokens per 448-pixel tile (modeling_internvl_chat.py:641 ``num_image_token=256``)."""
STRIDE = 64
"""The README's evaluation stride (README.md:498-499 ``--rope_pos_id_stride 64``): delta 64 / 256."""


def _prompt(seed: int) -> list[mrope.Segment]:
    """Random text, images and videos (encoder grids of 2 .. 14 patches a side, merge 2: blocks of 1 to
    196 tokens), starting and ending with text."""
    rng = np.random.default_rng(seed)
    segs: list[mrope.Segment] = [mrope.Text(int(rng.integers(1, 6)))]
    for _ in range(int(rng.integers(1, 4))):
        frames, h, w = (int(v) for v in rng.integers(1, (5, 8, 8)))
        still = rng.random() < 0.5
        segs += [
            mrope.Image(grid=(1, 2 * h, 2 * w)) if still else mrope.Video(grid=(frames, 2 * h, 2 * w)),
            mrope.Text(int(rng.integers(1, 6))),
        ]
    return segs


def v2pe_rope_pos_id(input_ids, start_id: int, end_id: int, stride: float = STRIDE) -> torch.Tensor:
    """OpenGVLab/V2PE@f96f189 internvl/model/internvl_chat/modeling_internvl_chat.py:637-709,
    ``get_rope_pos_id`` with ``rope_pos_id_version='v2pe_fix'`` (one row, attention mask all ones):
    float32 ``[T]``. Text up to and including ``<img>`` counts on from the last position (:659-663);
    the image's tokens are ``torch.arange(last, last + small_stride * (N + 1), small_stride)[1:]``
    (:665-669); ``</img>`` and what follows resume at ``ceil`` of the last one plus 1 (:670, :696)."""
    input_ids_0 = torch.as_tensor(input_ids)
    attention_mask_0 = torch.ones_like(input_ids_0)
    image_start_token_id_idxs = torch.where(input_ids_0 == start_id)[0]
    image_end_token_id_idxs = torch.where(input_ids_0 == end_id)[0]
    rope_pos_id_list = []
    last_record_pos_id = -1
    start_index = 0
    for i in range(len(image_start_token_id_idxs)):
        # the image's num_image_token * num_tile tokens: those between the wrappers
        n_tokens = int(image_end_token_id_idxs[i] - image_start_token_id_idxs[i] - 1)
        pre = attention_mask_0[start_index : image_start_token_id_idxs[i] + 1].long().cumsum(-1) - 1
        rope_pos_id_pre = pre + (last_record_pos_id + 1)
        rope_pos_id_list.append(rope_pos_id_pre)
        last_record_pos_id = rope_pos_id_pre[-1].long()
        small_stride = stride / NUM_IMAGE_TOKEN
        split_img_id_idxs = torch.arange(
            last_record_pos_id, last_record_pos_id + small_stride * (n_tokens + 1), small_stride
        )[1:].to(dtype=torch.float32)
        rope_pos_id_list.append(split_img_id_idxs)
        last_record_pos_id = torch.ceil(split_img_id_idxs[-1]).long()
        start_index = image_end_token_id_idxs[i]
    rope_pos_id_pre = attention_mask_0[start_index:].long().cumsum(-1) - 1 + (last_record_pos_id + 1)
    rope_pos_id_list.append(rope_pos_id_pre)
    return torch.cat(rope_pos_id_list).to(dtype=torch.float32)


def _reference(pos: mrope.Positions, rules: mrope.LayoutRules, stride: float = STRIDE):
    """``[3, T]`` (every row the authors' one row) and the decode delta: the next token after the prompt
    takes the last position plus 1 (modeling_internlm2.py:2002, ``position_ids[:, -1] + new tokens``),
    so ``delta = last + 1 - T``."""
    row = v2pe_rope_pos_id(pos.input_ids, rules.vision_start_id, rules.vision_end_id, stride)
    return row.expand(3, -1).numpy(), float(row[-1] + 1 - row.numel())


@pytest.mark.parametrize("seed", SEEDS)
def test_positions_equal_the_authors_code(seed) -> None:
    """Builder and token ids: float32 positions equal to the authors' float32 ids bit for bit."""
    rules = get_family("v2pe").rules
    assert rules.vision_step == STRIDE / NUM_IMAGE_TOKEN and rules.fractional_time
    pos = mrope.build_positions(_prompt(seed), model="v2pe")
    want, delta = _reference(pos, rules)
    assert pos.ids.dtype == np.float32
    np.testing.assert_array_equal(pos.ids, want)
    assert pos.delta == delta
    got, deltas = rope_index_of(pos, model="v2pe")
    assert got.dtype == torch.float32
    np.testing.assert_array_equal(got[:, 0].numpy(), want)
    assert deltas.tolist() == [[delta]]


@pytest.mark.parametrize("stride", [1, 16, 100, 256])
def test_every_stride_equals_the_authors_code(stride) -> None:
    """The training strides (``v2pe_rnd`` draws from 1 .. 256, :671-677) and one that is no power of two:
    ``vision_step = stride / 256`` (a few binary digits: every sum exact before the one rounding to
    float32). Stride 256 (step 1) gives int64 positions, equal to the authors' float32 values."""
    rules = get_family("v2pe").rules.replace(vision_step=stride / NUM_IMAGE_TOKEN)
    assert rules.fractional_time == (stride != 256)
    for seed in range(6):
        pos = mrope.build_positions(_prompt(seed), rules=rules)
        want, delta = _reference(pos, rules, stride)
        np.testing.assert_array_equal(pos.ids, want)
        np.testing.assert_array_equal(rope_index_of(pos, rules=rules)[0][:, 0].numpy(), want)
        assert pos.delta == delta


def test_far_positions_take_the_ceiling_of_the_float32_value() -> None:
    """From 2**16 float32 numbers are 1/128 or more apart, so a position of step 1/256 is rounded: the
    authors round each to float32 and take the ceiling of the rounded last one (:670); mrope the same,
    so the text after the block resumes where theirs does (the ceiling of the exact value would not: the
    negative control). (Farther out their ``torch.arange`` rounds its end to float32 and returns too few
    tokens: none for this block at 2**18.)"""
    rules = get_family("v2pe").rules.replace(vision_step=1 / NUM_IMAGE_TOKEN)
    wrapper = 70_000  # <|vision_start|> after 70,000 text tokens
    segs = [mrope.Text(wrapper), mrope.Image(grid=(1, 2, 2)), mrope.Text(2)]  # one image token
    pos = mrope.build_positions(segs, rules=rules)
    want, _ = _reference(pos, rules, 1)
    np.testing.assert_array_equal(pos.ids, want)
    np.testing.assert_array_equal(rope_index_of(pos, rules=rules)[0][:, 0].numpy(), want)
    exact_last = wrapper + 1 / NUM_IMAGE_TOKEN  # half a float32 step above 70,000: rounded to even
    assert float(np.float32(exact_last)) == wrapper == want[0, wrapper + 1]
    assert want[0, wrapper + 2] == wrapper + 1 != np.ceil(exact_last) + 1  # <|vision_end|>


@pytest.mark.parametrize("seed", range(6))
def test_negative_controls_of_the_positions(seed) -> None:
    """The reference tells the rules apart: Qwen2-VL's own 3-D layout, another stride, and the ``max+1``
    advance (text resuming at the fractional last position plus 1 instead of its ceiling)."""
    rules = get_family("v2pe").rules
    prompt = _prompt(seed)
    want, _ = _reference(mrope.build_positions(prompt, rules=rules), rules)
    for wrong in (get_family("qwen2-vl").rules, rules.replace(vision_step=32 / NUM_IMAGE_TOKEN)):
        got = mrope.build_positions(prompt, rules=wrong)
        assert not np.array_equal(got.ids, want)
    # max+1 differs after a block whose last position is not whole (tokens not a multiple of 4)
    got = mrope.build_positions(prompt, rules=rules.replace(advance="max+1"))
    whole = all((s.stop - s.start) * rules.vision_step % 1 == 0 for s in pos_spans(prompt, rules))
    assert np.array_equal(got.ids, want) == whole


def pos_spans(prompt: list[mrope.Segment], rules: mrope.LayoutRules) -> list[mrope.Span]:
    """The vision spans (one per block) of ``prompt``."""
    spans = mrope.build_positions(prompt, rules=rules).spans
    return [s for s in spans if s.kind in ("image", "video")]


def test_batch_and_packing_rows_equal_the_authors_code() -> None:
    prompts = [_prompt(s) for s in range(4)]
    rules = get_family("v2pe").rules
    batch = mrope.build_batch(prompts, model="v2pe")
    assert batch.ids.dtype == np.float32
    packed = mrope.pack(prompts, model="v2pe", max_length=4096)
    for row, prompt in enumerate(prompts):
        pos = mrope.build_positions(prompt, model="v2pe")
        want, _ = _reference(pos, rules)
        valid = batch.attention_mask[row].astype(bool)
        np.testing.assert_array_equal(batch.ids[:, row][:, valid], want)
    for prow in packed.rows:
        for k, sample in enumerate(prow.samples):
            a, b = int(prow.cu_seqlens[k]), int(prow.cu_seqlens[k + 1])
            want, delta = _reference(mrope.build_positions(prompts[sample], model="v2pe"), rules)
            np.testing.assert_array_equal(prow.position_ids[1:, a:b], want)
            assert float(prow.deltas[k]) == delta


def test_whole_steps_keep_the_program_and_the_shard_exact() -> None:
    """``vision_step`` 1 under the ``max+1`` advance gives int64 positions (the authors' stride 256),
    which the plan's position program and the rank shard's piece table would lay out by each block's
    grid; both take the line instead."""
    rules = get_family("v2pe").rules.replace(vision_step=1, advance="max+1")
    prompts = [_prompt(s) for s in range(4)]
    built = [mrope.build_positions(p, rules=rules) for p in prompts]
    for pos in built:
        want, _ = _reference(pos, rules, NUM_IMAGE_TOKEN)
        assert pos.ids.dtype == np.int64
        np.testing.assert_array_equal(pos.ids, want)
        np.testing.assert_array_equal(pos.program().expand(), want)
    got = shard_samples(prompts, rules=rules, world_size=1, rank=0)["position_ids"]
    np.testing.assert_array_equal(
        got, shard_samples(built, rules=rules, world_size=1, rank=0)["position_ids"]
    )


def test_a_continued_turn_is_the_tail_of_the_whole_conversation() -> None:
    """Continuation resumes from the state (the ceiling after a block): a turn continued after 3
    decoded tokens equals the tail of the conversation built at once, and the decode deltas agree."""
    for s in range(4):
        first, second = _prompt(s), _prompt(s + 100)
        whole = mrope.build_positions([*first, mrope.Text(3), *second], model="v2pe")
        turn = mrope.continue_positions(
            mrope.build_positions(first, model="v2pe"), second, generated=3, model="v2pe"
        )
        n = turn.positions.num_tokens
        np.testing.assert_array_equal(turn.positions.ids, whole.ids[:, -n:])
        assert turn.state.delta == whole.delta == mrope.conversation_state(whole).delta
    # a prompt that ends with a block: the next piece starts one past the ceiling of its last position
    ended = mrope.build_positions([mrope.Text(2), mrope.Video(grid=(1, 2, 6), wrap=False)], model="v2pe")
    assert ended.ids[0, -1] == 1.75 and mrope.conversation_state(ended).next_start == 3.0


def test_cli_and_service_carry_float_positions(tmp_path, capsys) -> None:
    """The CLI's npy and the service's JSON and npy carry the float32 positions the builder gives."""
    segs = [mrope.Text(3), mrope.Image(grid=(1, 6, 8)), mrope.Text(2)]
    pos = mrope.build_positions(segs, model="v2pe")
    want, _ = _reference(pos, get_family("v2pe").rules)
    out = tmp_path / "p.npy"
    args = ["positions", "--model", "v2pe", "--text", "3", "--image-grid", "1,6,8", "--text", "2"]
    assert main([*args, "--out", str(out)]) == 0
    capsys.readouterr()
    saved = np.load(out)
    assert saved.dtype == np.float32
    np.testing.assert_array_equal(saved, want)
    req = {
        "model": "v2pe",
        "segments": [
            {"type": "text", "tokens": 3},
            {"type": "image", "grid": [1, 6, 8]},
            {"type": "text", "tokens": 2},
        ],
    }
    with TestClient(create_app(Settings())) as client:
        sent = client.post("/v1/positions", json=req)
        assert sent.status_code == 200, sent.text
        np.testing.assert_array_equal(np.asarray(sent.json()["positions"], dtype=np.float32), want)
        npy = client.post("/v1/positions", json=req, headers={"accept": "application/x-npy"})
        arr = np.load(io.BytesIO(npy.content))
        assert arr.dtype == np.float32
        np.testing.assert_array_equal(arr, want)


def test_program_and_state_wire_forms_carry_floats() -> None:
    """A position program's bytes and a conversation state's JSON carry the float32 positions and the
    float counter (next_start one past the ceiling) back unchanged."""
    for seed in range(4):
        pos = mrope.build_positions(_prompt(seed), model="v2pe")
        want, _ = _reference(pos, get_family("v2pe").rules)
        program = pos.program()
        assert program.dtype == np.float32
        np.testing.assert_array_equal(type(program).from_bytes(program.to_bytes()).expand(), want)
        state = mrope.conversation_state(pos)
        assert isinstance(state.next_start, float) and state.next_start == want[0, -1] + 1
        assert mrope.ConversationState.from_dict(json.loads(json.dumps(state.to_dict()))) == state


# ------------------------------------------------------------------------ the authors' rotation


def v2pe_cos_sin(pos_id: torch.Tensor, base: float, dim: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """modeling_internlm2.py:288-309 (class ``V2PE``): ``inv_freq = 1 / base ** (arange(0, dim, 2) /
    dim)`` in fp32, ``freqs = torch.outer(pos_id, inv_freq)``, ``emb = cat(freqs, freqs)``: ``[T, dim]``."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    freqs = torch.outer(pos_id, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_rotation_equals_the_authors_code(backend, monkeypatch) -> None:
    """cos / sin equal the authors' bit for bit on float positions (every M-RoPE row the same position,
    so Qwen2-VL's sections all read it), and q / k rotate as their ``apply_rotary_pos_emb``
    (:425-432) within 1e-5, from the torch path and the Triton kernel (interpreted on the CPU)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    spec = get_family("v2pe").spec
    pos = mrope.build_positions(_prompt(3), model="v2pe")
    positions = torch.from_numpy(pos.ids)
    cos_ref, sin_ref = v2pe_cos_sin(positions[0], spec.theta)
    cos, sin = mrope.cos_sin(positions, spec)
    torch.testing.assert_close(cos, cos_ref, atol=0, rtol=0)
    torch.testing.assert_close(sin, sin_ref, atol=0, rtol=0)
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(positions.shape[1], 16, 128, generator=gen)
    k = torch.randn(positions.shape[1], 8, 128, generator=gen)
    qr, kr = mrope.apply_mrope(q, k, positions, spec, backend=backend)
    c, s = (
        cos_ref[:, None],
        sin_ref[:, None],
    )  # their rotate_half is the halves one (modeling_internlm2.py:416-420)
    torch.testing.assert_close(qr, q * c + _rotate_half(q) * s, atol=1e-5, rtol=0)
    torch.testing.assert_close(kr, k * c + _rotate_half(k) * s, atol=1e-5, rtol=0)
    # negative control: the positions truncated to whole numbers rotate otherwise
    cos_int, _ = mrope.cos_sin(positions.trunc(), spec)
    assert not torch.allclose(cos_int, cos_ref, atol=1e-3)


def test_v2pe_is_a_scheme_by_name() -> None:
    assert "v2pe" in SCHEME_NAMES and "v2pe" not in mrope.models.names()
    assert resolve_rules("v2pe", {"vision_step": 0.5}).vision_step == 0.5
    with pytest.raises(mrope.MRopeError, match="vision_step must be a finite number > 0"):
        get_family("v2pe").rules.replace(vision_step=0)
