"""Records per second of the model-card recipe (qwen-vl-utils + the processor) against mrope's
``route="qwen-vl-utils"``, on the same files, positions checked equal first.

The records are chat records of EXIF-rotated phone photos (stored 1280 x 960, orientation 6), frame
lists and MP4 clips made here. The reference is what a user of the model card runs: qwen-vl-utils 0.0.14
``fetch_image`` / ``fetch_video`` (decord reads the clips; it decodes and resizes the pixels) and a
Qwen2-VL image processor (transformers 5.24, the released bounds) for the photos' ``image_grid_thw``;
the grids then go through ``mrope.build_positions``, so both sides share the layout and the figure is
the cost of sizing the media. mrope reads headers only. Both run in this process, one after the other,
over the same records; the median of ``--repeat`` runs is reported.

Run: ``python benchmarks/bench_routes.py [--records 24] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support import media  # noqa: E402
from support.qwen_vl_utils_ref import load_qwen_vl_utils  # noqa: E402

import mrope  # noqa: E402
from mrope.pipeline import Preprocessor  # noqa: E402

MODEL = "qwen2.5-vl"


def make_records(root: Path, n: int) -> list[dict]:
    """``n`` records cycling over a rotated photo, a 6-frame list and a 4 s clip."""
    photo = media.write_image(root / "photo.jpg", 1280, 960, orientation=6)
    frames = [str(media.write_image(root / f"f{i}.jpg", 640, 480)) for i in range(6)]
    clip = media.write_video(root / "clip.mp4", 48, 12, 320, 240)
    items = [
        {"type": "image", "image": str(photo)},
        {"type": "video", "video": frames, "sample_fps": 1.0},
        {"type": "video", "video": str(clip)},
    ]
    return [
        {"messages": [{"role": "user", "content": [items[i % 3], {"type": "text", "text": "x"}]}]}
        for i in range(n)
    ]


def reference(qvu, processor, record: dict) -> list[list[int]]:
    """The model-card recipe: qwen-vl-utils sizes (and decodes) the media, the processor grids the photo."""
    item = record["messages"][0]["content"][0]
    if item["type"] == "image":
        grid = tuple(processor(images=[qvu.fetch_image(item)], return_tensors="np")["image_grid_thw"][0])
        segment = mrope.Image(grid=grid)
    else:
        video, rate = qvu.fetch_video(item, return_video_sample_fps=True)
        n, _, h, w = video.shape
        segment = mrope.Video(grid=(math.ceil(n / 2), h // 14, w // 14), fps=rate)
    return mrope.build_positions([segment, mrope.Text(1)], model=MODEL).ids.tolist()


def ours(pre: Preprocessor, record: dict) -> list[list[int]]:
    """mrope under the same route, from the same record (a text token counted as 1 on both sides)."""
    item = record["messages"][0]["content"][0]
    segments = [
        {"type": item["type"], item["type"]: item[item["type"]], **_keys(item)},
        {"type": "text", "tokens": 1},
    ]
    return pre.positions({"segments": segments}).ids.tolist()


def _keys(item: dict) -> dict:
    return {k: v for k, v in item.items() if k not in ("type", "image", "video")}


def timed(fn, records: list[dict], repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for record in records:
            fn(record)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    qvu = load_qwen_vl_utils()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        processor = Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=12845056)
    pre = Preprocessor(model=MODEL, route="qwen-vl-utils")
    with tempfile.TemporaryDirectory() as tmp:
        records = make_records(Path(tmp), args.records)
        for record in records[:3]:  # one of each kind: equal positions before any timing
            assert reference(qvu, processor, record) == ours(pre, record), record
        ref = timed(lambda r: reference(qvu, processor, r), records, args.repeat)
        mine = timed(lambda r: ours(pre, r), records, args.repeat)
    print(
        f"python {platform.python_version()}, {platform.machine()}, {args.records} records x {args.repeat} runs"
    )
    print("positions: equal on a photo, a frame list and a clip (checked before timing)")
    print(f"{'pipeline':<42}{'records/s':>12}")
    print(f"{'qwen-vl-utils 0.0.14 + processor (decodes)':<42}{args.records / ref:>12.1f}")
    print(f"{'mrope route=qwen-vl-utils (headers only)':<42}{args.records / mine:>12.1f}")
    print(f"ratio (mrope / reference): {ref / mine:.1f}x")


if __name__ == "__main__":
    main()
