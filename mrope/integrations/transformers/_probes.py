"""Probe a model before and after patching: its own rotary and get_rope_index must equal mrope's.

:func:`~mrope.integrations.transformers.patch` runs the model's own rotary and ``get_rope_index`` on
probes against mrope's before it changes anything, and the patched text model on a short probe after.

A model mrope does not reproduce raises :class:`~mrope._errors.PatchError` (or :class:`NotARotationError`);
every probe puts back the state it changed on the model.
"""

from __future__ import annotations

from typing import Any

import torch

from mrope._builder import build_batch
from mrope._errors import MRopeError, PatchError
from mrope._layout import engine_for
from mrope._segments import Image, Text, Video
from mrope._spec import RopeSpec
from mrope.integrations.transformers._discovery import inv_freq_buffer
from mrope.integrations.transformers._inputs import model_inputs, named_for
from mrope.integrations.transformers._rotation import TABLE_ORDERS, buffer_frequencies, in_halves
from mrope.ops import apply_mrope, cos_sin

MISSING = object()
"""An instance attribute a module did not have (what :func:`restore_attributes` reports for one a call
deleted, and what the patch's state records for an attribute to delete on unpatch)."""

_PROBE_MAX_POSITION = 997  # probe positions stay below any dynamic-NTK growth threshold
_FORWARD_PROBE_TOKENS = 5


def check_rotary(
    rotary: torch.nn.Module,
    original_apply: Any,
    spec: RopeSpec,
    backend: str,
    layer_type: str | None = None,
    *,
    released: bool = False,
    halves: bool = False,
) -> None:
    """The model's own rotary on probe positions must equal apply_mrope with ``spec`` (fp32 heads, the
    frequencies of the rotary's buffer: :func:`buffer_frequencies`; with
    ``halves``, its output reordered by :func:`in_halves`, as ``original_apply`` writes it). Dynamic NTK
    is probed past its growth threshold too; the rotary's state (a grown table) is put back.

    With ``released``, a model whose own rotary is not a rotation (:class:`NotARotationError`) passes if
    it equals apply_mrope on text positions (every axis the same): its frequencies, scaling and pairing
    are the spec's, and the spec's (released) layout replaces its own."""
    high = [_PROBE_MAX_POSITION]
    if spec.scaling.type == "dynamic" and spec.scaling.original_max_position_embeddings:
        high.append(2 * spec.scaling.original_max_position_embeddings)
    for top in high:
        before, buffers = dict(rotary.__dict__), dict(rotary._buffers)
        try:
            _probe_rotary(rotary, original_apply, spec, backend, layer_type, top, halves=halves)
        except NotARotationError:
            if not released:
                raise
            _probe_rotary(
                rotary, original_apply, spec, backend, layer_type, top, same_axes=True, halves=halves
            )
        finally:
            restore_attributes(rotary, before)
            rotary._buffers.clear()
            rotary._buffers.update(buffers)


def table_form(
    rotary: torch.nn.Module, spec: RopeSpec, layer_type: str | None = None
) -> tuple[str, bool] | None:
    """How the model's own rotary writes its cos / sin tables, against :func:`mrope.cos_sin` for
    ``spec``: ``(order, casts)``. ``order`` is ``"neox"`` (``cat([c, c])``) or ``"gptj"`` (each value
    twice), which need not be the spec's pairing (transformers 5.24's GLM-4.1V rotary interleaves its
    table, modeling_glm4v.py:490; HY-V4-VL's returns ``cat`` and its ``apply_rotary_pos_emb`` interleaves,
    modeling_hy_v4_vl.py:96-97); ``casts`` says whether the tables take the dtype of the hidden states
    (modeling_qwen2_vl.py:136) or stay fp32 (ERNIE-4.5-VL, modeling_ernie4_5_vl_moe.py:122). ``None``
    where no order gives the model's table (the half-precision rotation then stays mrope's own).

    Probed with bf16 hidden states and random positions per axis; the rotary's state is put back."""
    gen = torch.Generator().manual_seed(4321)
    axes = len(spec.mrope_section)
    positions = torch.randint(0, _PROBE_MAX_POSITION, (axes, 1, 11), generator=gen)
    device = next(rotary.buffers()).device
    heads = torch.zeros(1, 1, 11, spec.head_dim, dtype=torch.bfloat16, device=device)  # [B, H, S, D]
    extra = () if layer_type is None else (layer_type,)
    held = buffer_frequencies(spec, inv_freq_buffer(rotary, layer_type).dtype)
    before, buffers = dict(rotary.__dict__), dict(rotary._buffers)
    try:
        with torch.no_grad():
            cos, _ = type(rotary).forward(rotary, heads, positions.to(device), *extra)
    finally:
        restore_attributes(rotary, before)
        rotary._buffers.clear()
        rotary._buffers.update(buffers)
    ours, _ = cos_sin(positions, spec if held is None else held, layout="bhsd")
    if not isinstance(cos, torch.Tensor) or cos.shape != ours.shape:
        return None
    value = ours[..., : ours.shape[-1] // 2] if spec.pairing == "neox" else ours[..., ::2]
    for order in TABLE_ORDERS:
        table = torch.cat((value, value), dim=-1) if order == "neox" else value.repeat_interleave(2, dim=-1)
        if torch.equal(cos.cpu(), table.to(cos.dtype)):
            return order, cos.dtype == heads.dtype
    return None


def _probe_rotary(
    rotary: torch.nn.Module,
    original_apply: Any,
    spec: RopeSpec,
    backend: str,
    layer_type: str | None,
    top: int,
    same_axes: bool = False,
    halves: bool = False,
) -> None:
    device = next(rotary.buffers()).device
    gen = torch.Generator().manual_seed(1234)
    length = 29
    axes = len(spec.mrope_section)
    positions = torch.randint(0, top, (axes, 1, length), generator=gen).to(device)
    positions[0, 0, -1] = top - 1  # the largest position sets a dynamic table
    if same_axes:  # text positions
        positions = positions[:1].expand(axes, -1, -1).contiguous()
    q = torch.randn(1, 2, length, spec.head_dim, generator=gen).to(device)
    k = torch.randn(1, 1, length, spec.head_dim, generator=gen).to(device)
    extra = () if layer_type is None else (layer_type,)
    held = buffer_frequencies(spec, inv_freq_buffer(rotary, layer_type).dtype)
    with torch.no_grad():
        try:
            cos, sin = type(rotary).forward(rotary, q, positions, *extra)
            want_q, want_k = original_apply(q, k, cos, sin)
        except Exception as exc:  # the model's own code failed on a plain probe: not a model we can patch
            raise PatchError(
                f"{type(rotary).__name__} failed on probe positions ({type(exc).__name__}: {exc}); the model's "
                "own rotary does not run with this config"
            ) from None
        try:
            got_q, got_k = apply_mrope(
                q,
                k,
                positions,
                spec if held is None else held,
                layout="bhsd",
                backend=backend,
                angle_precision="fp32",
            )
        except MRopeError as exc:
            raise PatchError(f"apply_mrope cannot run this model's rotary: {exc}") from None
        if halves:
            got_q, got_k = in_halves(got_q, spec), in_halves(got_k, spec)
    for name, got, want in (("q", got_q, want_q), ("k", got_k, want_k)):
        if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
            err = (got - want).abs().max().item() if got.shape == want.shape else float("nan")
            mixed, layout = _table_axes(rotary, cos, positions, spec)
            cls = NotARotationError if mixed else PatchError
            raise cls(
                f"{type(rotary).__name__}: apply_mrope with the spec read from the config ({spec}) does not "
                f"reproduce the model's own rotation of {name} (max abs difference {err:.3g}); refusing to "
                f"patch.{layout}"
            )


class NotARotationError(PatchError):
    """The model's own rotary pairs channels driven by different position axes: not a rotation wherever
    those axes differ (transformers 5.24's HunyuanOCR). :func:`patch` refuses it under the default
    convention; ``convention="released"`` rotates with the released layout instead (the spec's)."""


def _runs(channels: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    out: list[str] = []
    for c in channels:
        if out and int(out[-1].split("-")[-1]) == c - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{c}"
        else:
            out.append(str(c))
    return ", ".join(out)


def _table_axes(
    rotary: torch.nn.Module, cos: Any, positions: torch.Tensor, spec: RopeSpec
) -> tuple[bool, str]:
    """Which position axis drives each channel of the model's own cos table, against the spec's layout.

    Returns ``(mixed, text)``: ``mixed`` when the table's rotation pairs (split halves for neox, adjacent
    channels for gptj) hold channels of different axes (not a rotation); ``text`` says which channels
    differ from the spec (empty when the table cannot be read channel by channel)."""
    inv_freq = getattr(rotary, "inv_freq", None)
    if not isinstance(cos, torch.Tensor) or cos.dim() != 3 or not isinstance(inv_freq, torch.Tensor):
        return False, ""
    width = spec.rotary_dim
    if cos.shape[-1] != width or inv_freq.numel() != width // 2:
        return False, ""
    half = width // 2
    channel = torch.arange(width)
    freq = channel % half if spec.pairing == "neox" else channel // 2
    partner = (channel + half) % width if spec.pairing == "neox" else channel ^ 1
    scale = float(getattr(rotary, "attention_scaling", 1.0))
    angles = positions[:, 0, :, None].float().cpu() * inv_freq.float().cpu()[freq]  # [A, S, width]
    table = cos[0].float().cpu()  # [S, width]
    error = (angles.cos() * scale - table).abs().amax(dim=1)  # [A, width]
    best = error.min(dim=0)
    found = torch.where(best.values <= 1e-4, best.indices, torch.full_like(channel, -1))
    wanted = torch.from_numpy(spec.axis_map())[freq]
    wrong = [int(c) for c in channel if found[c] != wanted[c]]
    if not wrong:
        return False, ""
    by_axis: dict[tuple[int, int], list[int]] = {}
    for c in wrong:
        by_axis.setdefault((int(found[c]), int(wanted[c])), []).append(c)
    what = "; ".join(
        f"{_runs(cs)} follow axis {'unknown' if a < 0 else a} (the spec: axis {b})"
        for (a, b), cs in by_axis.items()
    )
    text = f" In the model's cos/sin table channels {what}."
    by_pair: dict[tuple[int, int], list[int]] = {}
    for c in channel.tolist():
        a, b = int(found[c]), int(found[partner[c]])
        if c < partner[c] and a >= 0 and b >= 0 and a != b:
            by_pair.setdefault((a, b), []).append(c)
    if not by_pair:
        return False, text
    pairs = " and ".join(
        f"{_runs(cs)} (axis {a}) with {_runs([int(partner[c]) for c in cs])} (axis {b})"
        for (a, b), cs in by_pair.items()
    )
    return True, (
        f"{text} Its {spec.pairing} rotation pairs channels {pairs}: not a rotation wherever those axes' "
        "positions differ (every image token). mrope rotates each pair by one axis and will not copy it; "
        "patch(model, convention='released') rotates with the spec's (released) layout instead."
    )


def _probe_tokenize(text: str) -> list[int]:
    return [1000 + ord(c) % 500 for c in text]


def _probe_inputs(family: Any, rules: Any) -> dict[str, torch.Tensor]:
    """Two left-padded rows built by mrope: text, an image, text, a 2-patch video, text; text, an image."""
    m = rules.merge_size
    word = _probe_tokenize("probe")
    samples = [
        [
            Text(word),
            Image(grid=(1, 2 * m, 3 * m)),
            Text(word),
            Video(grid=(2, 2 * m, 2 * m), fps=2.0),
            Text(word),
        ],
        [Text(word[:2]), Image(grid=(1, 2 * m, 2 * m)), Text(word[:3])],
    ]
    if engine_for(rules) == "canvas":  # MiniCPM-V 4.7: a sliced image (slice markers, a newline)
        samples[1].insert(2, Image(grid=(1, 2 * m, 4 * m), tiles=(2, 2), thumbnail_grid=(1, m, 2 * m)))
    if rules.generates_images:  # GLM-Image: a source image and a target; two targets (large, preview)
        samples = [
            [
                Text(word),
                Image(grid=(1, 2 * m, 3 * m)),
                Text(word),
                Image(grid=(1, 3 * m, 2 * m), generate=True),
            ],
            [
                Text(word[:2]),
                Image(grid=(1, 2 * m, 2 * m), generate=True),
                Image(grid=(1, m, 2 * m), generate=True),
            ],
        ]
    batch = build_batch(samples, model=family, rules=rules, tokenizer=_probe_tokenize)
    inputs = model_inputs(batch)
    inputs.pop("position_ids")
    if "second_per_grid_ts" in inputs:
        inputs["second_per_grids"] = inputs["second_per_grid_ts"]
    return inputs


def restore_attributes(module: torch.nn.Module, before: dict[str, Any]) -> dict[str, Any]:
    """Put back the instance attributes a call changed; return what the call had set them to
    (:data:`MISSING` for one it deleted)."""
    changed = {
        k: module.__dict__.get(k, MISSING)
        for k in set(module.__dict__) | set(before)
        if module.__dict__.get(k, MISSING) is not before.get(k, MISSING)
    }
    for key in changed:
        if key in before:
            module.__dict__[key] = before[key]
        else:
            del module.__dict__[key]
    return changed


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and torch.equal(a.cpu(), b.cpu())
        )
    return type(a) is type(b) and a == b


def check_positions(owner: torch.nn.Module, replacement: Any, family: Any, rules: Any) -> None:
    """The model's own get_rope_index and mrope's stand-in on a probe batch: same positions, same deltas,
    and the same state left on the model (GLM-Image caches its decode positions; every other family
    keeps none). Both calls' state is rolled back."""
    try:
        probe = _probe_inputs(family, rules)
    except MRopeError as exc:
        raise PatchError(f"cannot build a probe batch under rules {rules.name!r}: {exc}") from None
    original = type(owner).get_rope_index
    args = named_for(original, probe)
    before = dict(owner.__dict__)
    try:
        with torch.no_grad():
            want_pos, want_delta = original(owner, **args)
    except Exception as exc:
        raise PatchError(
            f"{type(owner).__name__}.get_rope_index failed on a probe batch ({type(exc).__name__}: {exc}); "
            "cannot check mrope's positions against it"
        ) from None
    finally:
        want_state = restore_attributes(owner, before)
    try:
        got_pos, got_delta = replacement(**args)
    except MRopeError as exc:
        raise PatchError(f"mrope cannot compute this model's positions: {exc}") from None
    finally:
        got_state = restore_attributes(owner, before)
    if sorted(want_state) != sorted(got_state):
        raise PatchError(
            f"{type(owner).__name__}.get_rope_index keeps state between calls (it sets {sorted(want_state)}); "
            f"mrope's stand-in sets {sorted(got_state)}, so this model cannot be patched"
        )
    differs = [k for k in sorted(want_state) if not _same_value(got_state[k], want_state[k])]
    if differs:
        raise PatchError(
            f"mrope's stand-in leaves {differs} on {type(owner).__name__} different from its own "
            f"get_rope_index on a probe batch; refusing to patch.\n"
            + "\n".join(f"{k}: mrope {got_state[k]!r}, model {want_state[k]!r}" for k in differs)
        )
    same = got_pos.shape == want_pos.shape and torch.equal(got_pos.cpu(), want_pos.cpu().to(got_pos.dtype))
    same = same and torch.equal(got_delta.cpu().reshape(-1), want_delta.cpu().reshape(-1).to(got_delta.dtype))
    if not same:
        raise PatchError(
            f"mrope's positions (rules {rules.name!r}) differ from {type(owner).__name__}.get_rope_index on a probe "
            f"batch; refusing to patch.\nmrope: {got_pos.tolist()} {got_delta.tolist()}\n"
            f"model: {want_pos.tolist()} {want_delta.tolist()}"
        )


def check_text_forward(owner: torch.nn.Module) -> None:
    """Run the patched text model on a few random token ids ``[1, 5]`` with its own default positions:
    every place its code touches the rotary's output must accept the :class:`Rotation` stand-in.

    Token ids, not random embeddings: a text model may need the ids behind its embeddings (Qwen4-Exp's
    per-layer n-gram embeddings look them up, and from embeddings alone it recovers them only from exact
    rows of its table)."""
    text = owner.language_model
    table = text.get_input_embeddings().weight
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(0, table.shape[0], (1, _FORWARD_PROBE_TOKENS), generator=gen)
    with torch.no_grad():
        text(input_ids=ids.to(table.device), use_cache=False)


__all__ = [
    "MISSING",
    "NotARotationError",
    "check_positions",
    "check_rotary",
    "check_text_forward",
    "restore_attributes",
]
