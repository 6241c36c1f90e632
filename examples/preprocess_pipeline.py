"""Preprocess a JSONL of mixed samples (text, images, videos) into M-RoPE positions, at any scale.

Run: ``python examples/preprocess_pipeline.py [--out-dir DIR] [--engine local|datasets|ray]``

The script writes its own media (PNG and JPEG images, an MP4 video) and a ``samples.jsonl`` into
``--out-dir`` (default: a new temporary folder), then maps every sample to positions with
:func:`mrope.pipeline.process_record` (one record) or :func:`mrope.pipeline.process_batch` (a batch):

- ``local``: a plain loop in this process;
- ``datasets``: Hugging Face ``datasets.load_dataset("json", ...).map(process_record, ...)``;
- ``ray``: Ray Data ``read_json(...).map_batches(process_batch, ...)`` on a local Ray
  (``ray.init(num_cpus=2)``), or on a cluster with ``--ray-address ray://head:10001`` (the media paths
  must then be readable by every worker, e.g. on a shared file system or object-store mount).

Each sample's positions are saved next to the media as ``<id>.npy`` (int64 ``[3, T]``), and one line per
sample goes to ``results.jsonl`` (tokens, delta, grids, error). One sample names a missing file on
purpose: it is recorded with its error, and the others are unaffected.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import av
import numpy as np
from PIL import Image

from mrope.pipeline import RESULT_COLUMNS, plain, process_batch, process_record

MODEL = "qwen2.5-vl"


# ----------------------------------------------------------------------------------------- media


def write_image(path: Path, width: int, height: int) -> None:
    """A colour gradient image."""
    x = np.linspace(0, 255, width, dtype=np.uint8)[None, :, None]
    y = np.linspace(0, 255, height, dtype=np.uint8)[:, None, None]
    rgb = np.concatenate(np.broadcast_arrays(x, y, 255 - x), axis=2)
    Image.fromarray(np.ascontiguousarray(rgb), "RGB").save(path)


def write_video(path: Path, frames: int = 24, fps: int = 12, width: int = 96, height: int = 64) -> None:
    """An MPEG-4 video whose frames fade from black to white."""
    with av.open(str(path), "w") as out:
        stream = out.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for k in range(frames):
            level = int(255 * k / max(frames - 1, 1))
            rgb = np.full((height, width, 3), level, dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)


def make_samples(root: Path) -> Path:
    """Media files and a JSONL of samples that use them (paths relative to ``root``)."""
    write_image(root / "cat.png", 448, 336)
    write_image(root / "chart.jpg", 896, 448)
    write_video(root / "clip.mp4")
    samples: list[dict[str, Any]] = [
        {"id": "caption", "segments": [{"type": "text", "tokens": 12}, {"type": "image", "path": "cat.png"}]},
        {
            "id": "chat",
            "messages": [
                {"role": "system", "content": [{"type": "text", "tokens": 9}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "image": "cat.png"},
                        {"type": "video", "video": "clip.mp4", "fps": 2.0},
                        {"type": "text", "tokens": 6},
                    ],
                },
            ],
        },
        {
            "id": "tiled-chart",
            "segments": [
                {"type": "image", "path": "chart.jpg", "tiling": True},
                {"type": "text", "tokens": 4},
            ],
        },
        {
            "id": "grids-only",
            "segments": [
                {"type": "video", "grid": [8, 28, 28], "fps": 2.0},
                {"type": "text", "ids": [151644, 198]},
            ],
        },
        {"id": "broken", "segments": [{"type": "image", "path": "missing.png"}]},
    ]
    path = root / "samples.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in samples))
    return path


# --------------------------------------------------------------------------------------- engines


def run_local(jsonl: Path, options: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for line in jsonl.read_text().splitlines():
        record = json.loads(line)
        rows.append({"id": record["id"], **process_record(record, **options)})
    return rows


def run_datasets(jsonl: Path, options: dict[str, Any]) -> list[dict[str, Any]]:
    import datasets

    datasets.disable_progress_bars()
    ds = datasets.load_dataset(
        "json", data_files=str(jsonl), split="train", cache_dir=str(jsonl.parent / ".hf")
    )
    ds = ds.map(process_record, fn_kwargs=options, remove_columns=["segments", "messages"])
    return list(ds)


def run_ray(jsonl: Path, options: dict[str, Any], address: str | None) -> list[dict[str, Any]]:
    import ray
    import ray.data

    if address:
        ray.init(address=address)  # e.g. "ray://head-node:10001": the same code on a cluster
    else:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False
        ds = ray.data.read_json(str(jsonl), lines=True)  # JSONL whose nested fields may differ in type
        # one call per batch; batch_format="pandas" or "numpy" both work. For millions of samples write
        # the result instead of collecting it: .write_parquet("s3://bucket/positions/")
        out = ds.map_batches(process_batch, fn_kwargs=options, batch_format="pandas", batch_size=64)
        return out.take_all()
    finally:
        ray.shutdown()


# ------------------------------------------------------------------------------------------ main


def save(rows: list[dict[str, Any]], root: Path) -> int:
    """``<id>.npy`` next to the media and ``results.jsonl``; prints a summary, returns the failure count."""
    failed = 0
    with (root / "results.jsonl").open("w") as f:
        for row in sorted(rows, key=lambda r: r["id"]):
            values = {k: plain(row[k]) for k in RESULT_COLUMNS}
            if values["error"]:
                failed += 1
            else:
                np.save(root / f"{row['id']}.npy", np.asarray(values["positions"], dtype=np.int64))
            summary = {k: v for k, v in values.items() if k != "positions"}
            f.write(json.dumps({"id": row["id"], **summary}) + "\n")
            grids = values["image_grid_thw"] + values["video_grid_thw"]
            status = f"error: {values['error']}" if values["error"] else f"grids {grids}"
            print(f"{row['id']:<12} {values['num_tokens']:>6} tokens  delta {values['delta']:>6}  {status}")
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", help="where media, samples and results go (default: a new temp folder)")
    parser.add_argument("--engine", choices=("local", "datasets", "ray"), default="local")
    parser.add_argument("--ray-address", help="a Ray cluster, e.g. ray://head:10001 (default: a local Ray)")
    args = parser.parse_args(argv)
    root = Path(args.out_dir or tempfile.mkdtemp(prefix="mrope-preprocess-")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    jsonl = make_samples(root)
    options = {"model": MODEL, "base_dir": str(root)}
    if args.engine == "local":
        rows = run_local(jsonl, options)
    elif args.engine == "datasets":
        rows = run_datasets(jsonl, options)
    else:
        rows = run_ray(jsonl, options, args.ray_address)
    failed = save(rows, root)
    print(f"{len(rows)} samples, {failed} failed (recorded in results.jsonl); positions saved in {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
