"""``mrope probe VIDEO``: the video's metadata and the frames a preset would sample, with their times;
its audio track (and an audio-only file's), with the audio tokens of an omni model."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from mrope._audio_grid import audio_tokens
from mrope._cli._args import CliError, positive_int, positive_number, rule_overrides
from mrope._cli._sequence import model_from_args, model_name
from mrope._errors import MRopeError
from mrope._layout import engine
from mrope._rules import LayoutRules
from mrope.media import VideoInfo, load_video, probe_video
from mrope.media._audio import audio_from_info, probe_audio
from mrope.media._frame_sampling import frame_request, sample_video_frames
from mrope.models import resolve_rules
from mrope.schema._fields import model_names


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
        help="the model, required: " + ", ".join(model_names()) + " (or a Hugging Face model_type / repo id)",
    )
    p.add_argument("--model-dir", metavar="DIR", help="a checkpoint folder read by mrope.from_pretrained")
    p.add_argument(
        "--fps",
        help="sampling rate, frames per second (default: the preset's sampling; Qwen2-VL / Qwen2.5-VL keep every frame)",
    )
    p.add_argument("--nframes", help="sample exactly this many frames instead of a rate")
    p.add_argument("--rule", action="append", default=[], metavar="KEY=VALUE", help="LayoutRules override")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(run=run)


def _patch_column(rules: LayoutRules, video: Any, n_patches: int) -> tuple[str, list[Any]]:
    """The header and values of the per-patch time column: the t offset (a number: int, or float for the
    omni timeline), or the timestamp text."""
    if rules.temporal == "timestamps":
        times = video.patch_times(rules.temporal_patch_size, rules.fps, rules.timestamp_time)
        return "timestamp", [rules.format_timestamp(x) for x in times]
    spg = video.resolved_second_per_grid(rules.temporal_patch_size, rules.fps)
    # the engine's own offsets: int64, or float32 on the omni timeline (fractional for Qwen3-Omni)
    return "t offset", engine(rules).video_time(n_patches, spg, rules).tolist()


def _audio(path: str, rules: LayoutRules) -> dict[str, Any]:
    """An audio track's metadata, and its mel frames and tokens under rules with audio."""
    info = probe_audio(path)
    doc: dict[str, Any] = {**asdict(info), "duration": info.duration}
    if rules.has_audio:
        audio = audio_from_info(info, rules)
        doc["mel_frames"] = audio.mel_frames
        doc["audio_tokens"] = audio_tokens(audio, rules)
    return doc


def describe(
    path: str, model: str, rules: LayoutRules, fps: float | None, nframes: int | None
) -> dict[str, Any]:
    """Everything ``probe`` reports, as plain JSON values."""
    from mrope.media._audio import stream_types

    if fps is not None and nframes is not None:
        raise CliError("give --fps or --nframes, not both")
    try:
        kinds = stream_types(path)
    except MRopeError:
        kinds = ()  # probe_video says what is wrong with the file
    if "audio" in kinds and "video" not in kinds:  # an audio file
        return {"file": path, "model": model, "audio": _audio(path, rules)}
    info: VideoInfo = probe_video(path)
    idx = sample_video_frames(info, rules, frame_request(rules, fps=fps, nframes=nframes))
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
        **({"audio": _audio(path, rules)} if "audio" in kinds else {}),
    }


def _render_audio(doc: dict[str, Any]) -> str:
    a = doc["audio"]
    line = (
        f"  audio: {a['codec'] or '?'}, {a['sample_rate']} Hz, {a['channels']} channel(s), {a['duration']:.3f} s "
        f"({a['num_samples']} samples, from the {a['timing']})"
    )
    if "audio_tokens" in a:
        line += f" -> {a['mel_frames']} mel frames, {a['audio_tokens']} audio tokens for {doc['model']}"
    return line


def render(doc: dict[str, Any]) -> str:
    """The human-readable form of :func:`describe`'s result."""
    if "video" not in doc:
        return f"{doc['file']}: an audio file\n" + _render_audio(doc)
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
        value = per_patch[f["patch"]]
        shown = (f"{value:g}" if isinstance(value, float) else str(value)) if f["patch"] != last else ""
        last = f["patch"]
        lines.append(f"{f['frame']:>6} {f['index']:>7} {f['time']:>9.3f} {f['patch']:>6}  {shown}")
    if "audio" in doc:
        lines.append(_render_audio(doc))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    fps = None if args.fps is None else positive_number(args.fps, "--fps")
    nframes = None if args.nframes is None else positive_int(args.nframes, "--nframes")
    model = model_from_args(args.model, None, args.model_dir)
    rules = resolve_rules(model, rule_overrides(args.rule) or None)
    doc = describe(args.video, model_name(model), rules, fps, nframes)
    if args.json:
        print(json.dumps(doc))
    else:
        print(render(doc))
    return 0
