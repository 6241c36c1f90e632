"""Benchmark: records/s of mrope.pipeline against the transformers processor route on the same image files.

A training-data job needs each record's position ids. The transformers route runs the family's image
processor on every image (decode, resize, normalise, patchify: pixels the positions do not need), builds
the prompt's ids and calls the model's ``get_rope_index``; mrope's pipeline reads each image's header and
builds the positions. Both sides are Qwen2-VL (the released ``preprocessor_config.json`` bounds), the same
JPEG files (made here, 224-1600 px a side), one image and two text runs a record. Before timing, every
record's positions are checked equal on both sides (so the grids agree too). The two routes alternate
in one process, three rounds each; the ratio is of medians.

Run: ``python benchmarks/bench_pipeline.py [--records N]``.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from PIL import Image as PILImage

from mrope.pipeline import Preprocessor

VISION_START, IMAGE_PAD, VISION_END = 151652, 151655, 151653  # Qwen2-VL's tokenizer
HEAD, TAIL = 40, 12  # text tokens before and after the image


def write_images(folder: Path, n: int, seed: int = 0) -> list[Path]:
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(n):
        w, h = (int(v) for v in rng.integers(224, 1600, size=2))
        pixels = rng.integers(0, 255, size=(h // 8, w // 8, 3), dtype=np.uint8)
        path = folder / f"img_{i:04d}.jpg"
        PILImage.fromarray(pixels).resize((w, h)).save(path, quality=85)
        paths.append(path)
    return paths


def hf_route() -> tuple[object, object]:
    """Qwen2-VL's image processor (released bounds) and ``Qwen2VLModel.get_rope_index`` on a stand-in
    model carrying only the config it reads."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel

    processor = Qwen2VLImageProcessorPil(
        size={"shortest_edge": 3136, "longest_edge": 12845056}, patch_size=14, merge_size=2
    )
    fake = SimpleNamespace(config=SimpleNamespace(vision_config=SimpleNamespace(spatial_merge_size=2)))
    fake.get_vision_position_ids = functools.partial(Qwen2VLModel.get_vision_position_ids, fake)
    return processor, functools.partial(Qwen2VLModel.get_rope_index, fake)


def transformers_positions(paths: list[Path], processor: object, rope_index: object) -> list[torch.Tensor]:
    out = []
    for path in paths:
        with PILImage.open(path) as im:
            rgb = im.convert("RGB")
        grid = processor(images=[rgb], return_tensors="pt")["image_grid_thw"]
        n = int(grid.prod()) // 4
        ids = [1] * HEAD + [VISION_START] + [IMAGE_PAD] * n + [VISION_END] + [1] * TAIL
        types = [0] * (HEAD + 1) + [1] * n + [0] * (1 + TAIL)
        ids_t, types_t = torch.tensor([ids]), torch.tensor([types], dtype=torch.int32)
        positions, _ = rope_index(ids_t, types_t, grid, None, attention_mask=torch.ones_like(ids_t))
        out.append(positions[:, 0])
    return out


def mrope_positions(records: list[dict], pre: Preprocessor) -> list[np.ndarray]:
    return [pre.positions(r).ids for r in records]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=60)
    args = parser.parse_args()
    import transformers

    print(
        f"# bench_pipeline on {platform.machine()} / {platform.python_version()}, torch {torch.__version__}, "
    )
    print(f"# transformers {transformers.__version__}; load average at start {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_images(Path(tmp), args.records)
        records = [
            {
                "segments": [
                    {"type": "text", "tokens": HEAD},
                    {"type": "image", "path": str(p)},
                    {"type": "text", "tokens": TAIL},
                ]
            }
            for p in paths
        ]
        # "transformers5": the convention that equals transformers 5.24's get_rope_index
        pre = Preprocessor(model="qwen2-vl", convention="transformers5")
        processor, rope_index = hf_route()
        theirs = transformers_positions(paths, processor, rope_index)
        ours = mrope_positions(records, pre)
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert np.array_equal(a, b.numpy()), f"record {i}: positions differ from the transformers route"
        times: dict[str, list[float]] = {"mrope.pipeline": [], "transformers processor + get_rope_index": []}
        for _ in range(3):
            start = time.perf_counter()
            mrope_positions(records, pre)
            times["mrope.pipeline"].append(time.perf_counter() - start)
            start = time.perf_counter()
            transformers_positions(paths, processor, rope_index)
            times["transformers processor + get_rope_index"].append(time.perf_counter() - start)
    print(f"{args.records} records (one JPEG of 224-1600 px a side + 52 text tokens each); positions equal")
    print("| route | records/s | ms per record |")
    print("|---|---:|---:|")
    medians = {k: statistics.median(v) for k, v in times.items()}
    for name, seconds in medians.items():
        print(f"| {name} | {args.records / seconds:,.1f} | {1000 * seconds / args.records:.2f} |")
    ratio = medians["transformers processor + get_rope_index"] / medians["mrope.pipeline"]
    print(f"mrope.pipeline / transformers route: {ratio:.0f}x the records per second")
    print(f"load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
