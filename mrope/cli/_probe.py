"""``mrope probe VIDEO``: the video's metadata and the frames a preset would sample, with their times."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from mrope.builder import temporal_index
from mrope.cli._args import CliError, positive_int, positive_number, rule_overrides
from mrope.cli._sequence import model_from_args
from mrope.rules import PRESET_NAMES, LayoutRules, resolve_rules
from mrope.vision import VideoInfo, load_video, probe_video, sample_frame_indices


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "probe",
        help="a video's metadata and the frames the preset samples",
        description="Read a video's metadata (no decoding) and list the frames the model's preset would "
        "sample: frame index, time in seconds, temporal patch, and the patch's time coordinate.",
    )
    p.add_argument("video", help="a video file")
    p.add_argument(
        "--model",
        metavar="MODEL",
        help="the model, required: " + ", ".join(PRESET_NAMES) + " (or a Hugging Face model_type / repo id)",
    )
    p.add_argument("--fps", help="sampling rate, frames per second (default: the preset's, 2.0)")
    p.add_argument("--nframes", help="sample exactly this many frames instead of a rate")
    p.add_argument("--rule", action="append", default=[], metavar="KEY=VALUE", help="LayoutRules override")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(run=run)


def _patch_column(rules: LayoutRules, video: Any, n_patches: int) -> tuple[str, list[str]]:
    """The header and values of the per-patch time column: the t offset, or the timestamp text."""
    if rules.temporal == "timestamps":
        times = video.patch_times(rules.temporal_patch_size, rules.fps, rules.timestamp_time)
        return "timestamp", [rules.format_timestamp(x) for x in times]
    tau = temporal_index(
        n_patches, rules, video.resolved_second_per_grid(rules.temporal_patch_size, rules.fps)
    )
    return "t offset", [str(int(v)) for v in tau]


def describe(
    path: str, model: str, rules: LayoutRules, fps: float | None, nframes: int | None
) -> dict[str, Any]:
    """Everything ``probe`` reports, as plain JSON values."""
    if fps is not None and nframes is not None:
        raise CliError("give --fps or --nframes, not both")
    info: VideoInfo = probe_video(path)
    idx = sample_frame_indices(
        info.num_frames,
        info.fps,
        fps=rules.fps if fps is None else fps,
        nframes=nframes,
        min_frames=rules.min_frames,
        max_frames=rules.max_frames,
    )
    video = load_video(info, rules=rules, fps=fps, nframes=nframes)
    _, gh, gw = video.grid
    n_patches = video.grid[0]
    per_patch = (gh // rules.merge_size) * (gw // rules.merge_size)
    column, values = _patch_column(rules, video, n_patches)
    tps = rules.temporal_patch_size
    frames = [
        {"frame": k, "index": int(i), "time": float(t), "patch": k // tps}
        for k, (i, t) in enumerate(zip(idx.tolist(), video.frame_times or (), strict=True))
    ]
    meta = asdict(info)
    meta.pop("frame_times")
    meta["variable_rate"] = info.variable_rate
    return {
        "file": path,
        "model": model,
        "video": meta,
        "sampling": {
            "frames": int(idx.size),
            "fps": float(video.fps or 0.0),
            "second_per_grid": float(video.second_per_grid or 0.0),
            "grid": list(video.grid),
            "llm_grid": [n_patches, gh // rules.merge_size, gw // rules.merge_size],
            "vision_tokens": n_patches * per_patch,
        },
        "frames": frames,
        "patches": [{"patch": k, column.replace(" ", "_"): v} for k, v in enumerate(values)],
    }


def render(doc: dict[str, Any]) -> str:
    """The human-readable form of :func:`describe`'s result."""
    v, s = doc["video"], doc["sampling"]
    rate = "variable rate (timed by frame timestamps)" if v["variable_rate"] else "constant rate"
    lines = [
        f"{doc['file']}: {v['codec'] or '?'} in {v['container'] or '?'} (metadata from the {v['timing']})",
        f"  {v['num_frames']} frames, {v['fps']:.3f} fps, {v['duration']:.3f} s, {v['width']}x{v['height']} px "
        f"(w x h), rotation {v['rotation']}, {rate}",
        f"{doc['model']} samples {s['frames']} frames at {s['fps']:.3f} fps -> encoder grid "
        f"{'x'.join(map(str, s['grid']))} (t x h x w), LLM grid {'x'.join(map(str, s['llm_grid']))}, "
        f"{s['vision_tokens']} vision tokens, {s['second_per_grid']:.3f} s per temporal patch",
    ]
    column = next((k for k in (doc["patches"][0] if doc["patches"] else {}) if k != "patch"), "t_offset")
    per_patch = {p["patch"]: p[column] for p in doc["patches"]}
    header = f"{'frame':>6} {'index':>7} {'time (s)':>9} {'patch':>6}  {column.replace('_', ' ')}"
    lines.append(header)
    last = None
    for f in doc["frames"]:
        shown = per_patch[f["patch"]] if f["patch"] != last else ""
        last = f["patch"]
        lines.append(f"{f['frame']:>6} {f['index']:>7} {f['time']:>9.3f} {f['patch']:>6}  {shown}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    fps = None if args.fps is None else positive_number(args.fps, "--fps")
    nframes = None if args.nframes is None else positive_int(args.nframes, "--nframes")
    model = model_from_args(args.model)
    rules = resolve_rules(model, rule_overrides(args.rule) or None)
    doc = describe(args.video, model, rules, fps, nframes)
    if args.json:
        print(json.dumps(doc))
    else:
        print(render(doc))
    return 0
