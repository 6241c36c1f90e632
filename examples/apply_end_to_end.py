"""From an image and a text prompt to rotated q and k: positions, then M-RoPE, checked against float64.

Run: ``python examples/apply_end_to_end.py [--backend auto|torch|triton]``

For every preset the script sizes a real (generated) image with :func:`mrope.media.load_image`, builds
the positions of ``text + image + text`` with :func:`mrope.build_positions`, rotates random queries and
keys with :func:`mrope.apply_mrope` (``layout="thd"``: q ``[T, heads, head_dim]``), and compares the
result with :func:`reference`, a float64 implementation written here from the conventions alone:

- ``inv_freq[i] = theta ** (-2 i / rotary_dim)``;
- frequency ``i`` reads the t, h or w row of the positions: chunked sections (Qwen2/2.5-VL, GLM-4.1V) or
  interleaved ones (Qwen3-VL);
- channel pairs ``(i, i + rotary_dim / 2)`` ("neox") or ``(2i, 2i + 1)`` ("gptj"), each turned by
  ``position * inv_freq[i]``; channels past ``rotary_dim`` pass through (GLM-4.1V rotates half).

It exits with status 1 if any preset differs by more than fp32 rounding allows.
"""

from __future__ import annotations

import argparse
import io
import sys

import numpy as np
import torch
from PIL import Image as PILImage

import mrope
from mrope.media import load_image

PRESETS = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "glm-4.1v")
TOLERANCE = 5e-5
"""Largest absolute error accepted: unit-scale fp32 inputs and fp32 angles at positions below ~100 give
errors near 5e-6; a wrong axis, pair or frequency gives errors of order 1."""


def reference(x: np.ndarray, positions: np.ndarray, spec: mrope.RopeSpec) -> np.ndarray:
    """M-RoPE in float64: ``x`` ``[T, heads, head_dim]`` rotated by ``positions`` ``[3, T]``."""
    if spec.scaling.type != "none":
        raise ValueError("this reference covers unscaled frequencies only")
    d = spec.rotary_dim
    f = d // 2
    i = np.arange(f)
    inv_freq = float(spec.theta) ** (-2.0 * i / d)
    s_t, s_h, s_w = spec.mrope_section
    if spec.section_layout == "chunked":
        axis = np.where(i < s_t, 0, np.where(i < s_t + s_h, 1, 2))
    else:  # interleaved: T H W T H W ... then the leftover T
        axis = np.zeros(f, dtype=np.int64)
        axis[(i % 3 == 1) & (i < 3 * s_h)] = 1
        axis[(i % 3 == 2) & (i < 3 * s_w)] = 2
    angle = positions[axis, :].T.astype(np.float64) * inv_freq  # [T, f]
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    out = x.astype(np.float64).copy()
    if spec.pairing == "neox":
        a, b = out[..., :f].copy(), out[..., f:d].copy()
        out[..., :f], out[..., f:d] = a * cos - b * sin, b * cos + a * sin
    else:  # gptj: adjacent channels
        a, b = out[..., 0:d:2].copy(), out[..., 1:d:2].copy()
        out[..., 0:d:2], out[..., 1:d:2] = a * cos - b * sin, b * cos + a * sin
    return out


def photo_bytes(width: int = 448, height: int = 336) -> bytes:
    yy, xx = np.mgrid[0:height, 0:width]
    rgb = np.stack([xx % 256, yy % 256, (xx * yy) % 256], axis=2).astype(np.uint8)
    buf = io.BytesIO()
    PILImage.fromarray(rgb, "RGB").save(buf, "PNG")
    return buf.getvalue()


def run(model: str, backend: str, photo: bytes) -> float:
    """Max abs error of q and k for one preset (prints a line)."""
    spec = mrope.models.get_family(model).spec
    image = load_image(photo, model=model)
    positions = mrope.build_positions([mrope.Text(14), image, mrope.Text(9)], model=model)
    gen = torch.Generator().manual_seed(0)
    t = positions.num_tokens
    q = torch.randn(t, 4, spec.head_dim, generator=gen)  # 4 query heads
    k = torch.randn(t, 2, spec.head_dim, generator=gen)  # 2 key heads (grouped-query attention)
    device = "cuda" if backend in ("auto", "triton") and torch.cuda.is_available() else "cpu"
    pos = positions.torch().to(device)
    q_rot, k_rot = mrope.apply_mrope(q.to(device), k.to(device), pos, spec, layout="thd", backend=backend)
    err = max(
        float(np.abs(q_rot.double().cpu().numpy() - reference(q.numpy(), positions.ids, spec)).max()),
        float(np.abs(k_rot.double().cpu().numpy() - reference(k.numpy(), positions.ids, spec)).max()),
    )
    print(
        f"{model:<11} {t:>4} tokens, image grid {image.grid}, max position {int(positions.ids.max()):>3}, "
        f"rotary {spec.rotary_dim}/{spec.head_dim} {spec.section_layout} {spec.pairing}: "
        f"max |apply_mrope - float64 reference| = {err:.2e} on {device}"
    )
    return err


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="torch", choices=("auto", "torch", "triton"))
    args = parser.parse_args(argv)
    photo = photo_bytes()
    errors = {model: run(model, args.backend, photo) for model in PRESETS}
    bad = [m for m, e in errors.items() if not e <= TOLERANCE]
    if bad:
        print(f"FAILED: {', '.join(bad)} differ by more than {TOLERANCE:g}")
        return 1
    print(f"all presets match the float64 reference within {TOLERANCE:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
