"""Argument parsing: one-line errors, ordered segment flags and their modifiers, shared options.

Segment flags (``--text``, ``--image``, ``--image-grid``, ``--video``, ``--video-grid``) and modifier flags
(``--crop``, ``--tiles``, ``--fps``, ...) all append ``(flag, value)`` to one list in command-line order,
so ``--text 12 --image cat.jpg --text 5`` keeps its order and a modifier knows which segment it follows.
:func:`items_from_flags` turns that list into the JSON segments of ``POST /v1/positions`` (plus ``path``
for files), which :mod:`mrope.pipeline` reads like any record.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import fields
from typing import Any, NoReturn

from mrope._rules import LayoutRules
from mrope.models._routes import ROUTE_NAMES
from mrope.pipeline import DEFAULT_MAX_TOKENS
from mrope.schema._fields import model_names


class CliError(Exception):
    """Bad command-line input: reported as one line on stderr, exit code 2."""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (no usage dump) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{self.prog}: error: {message} (see --help)")


class Ordered(argparse.Action):
    """Appends ``(flag, value)`` to ``namespace.items``, keeping the command-line order."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        items = list(getattr(namespace, self.dest, None) or [])
        items.append((self.option_strings[0], values))
        setattr(namespace, self.dest, items)


SEGMENT_FLAGS = ("--text", "--image", "--image-grid", "--video", "--video-grid")

MODIFIERS: dict[str, tuple[str, ...]] = {
    "--crop": ("--image",),
    "--tiles": ("--image", "--image-grid", "--video-grid"),
    "--thumbnail": ("--image-grid",),
    "--thumbnail-grid": ("--image-grid", "--video-grid"),
    "--generate": ("--image-grid",),
    "--origin": ("--image-grid",),
    "--fps": ("--video", "--video-grid"),
    "--nframes": ("--video",),
    "--second-per-grid": ("--video-grid",),
    "--no-wrap": ("--image", "--image-grid", "--video", "--video-grid"),
}
"""Modifier flag -> the segment flags it may follow (it applies to the segment right before it)."""


def int_list(text: str, n: int, what: str) -> list[int]:
    """``"1,28,28"`` or ``"1x28x28"`` -> ``[1, 28, 28]`` (exactly ``n`` ints)."""
    parts = text.replace("x", ",").split(",")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if len(values) != n:
        raise CliError(f"{what} must be {n} comma-separated ints; got {text!r}")
    return values


def positive_number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise CliError(f"{what} must be a finite number > 0; got {text!r}")
    return value


def positive_int(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise CliError(f"{what} must be an int >= 1; got {text!r}")
    return value


def _segment(flag: str, value: str) -> dict[str, Any]:
    if flag == "--text":
        stripped = value.strip()
        if stripped.lstrip("+-").isdigit():
            if int(stripped) < 0:
                raise CliError(f"--text takes a token count >= 0 or words; got {value!r}")
            return {"type": "text", "tokens": int(stripped)}
        return {"type": "text", "text": value}
    if flag in ("--image", "--video"):
        return {"type": flag[2:], "path": value}
    return {"type": flag[2:7], "grid": int_list(value, 3, flag)}


def _modify(item: dict[str, Any], flag: str, value: Any, owner: str) -> None:
    if flag == "--crop":
        item["crop"] = int_list(value, 4, "--crop (top,left,height,width in pixels)")
    elif flag == "--tiles":
        if owner == "--image":
            if value:
                raise CliError(
                    "--tiles after an --image file takes no value (the tile grid is chosen from the size)"
                )
            item["tiling"] = True
        else:
            if not value:
                raise CliError(f"--tiles after {owner} needs COLSxROWS, e.g. --tiles 2x2")
            item["tiles"] = int_list(value, 2, "--tiles (COLSxROWS)")
    elif flag == "--thumbnail":
        item["thumbnail"] = True
    elif flag == "--thumbnail-grid":
        item["thumbnail_grid"] = int_list(value, 3, "--thumbnail-grid (T,H,W)")
    elif flag == "--generate":
        item["generate"] = True
    elif flag == "--origin":
        item["origin"] = int_list(value, 2, "--origin (row,col in merged tokens)")
    elif flag == "--fps":
        item["fps"] = positive_number(value, "--fps")
    elif flag == "--nframes":
        item["nframes"] = positive_int(value, "--nframes")
    elif flag == "--second-per-grid":
        item["second_per_grid"] = positive_number(value, "--second-per-grid")
    elif flag == "--no-wrap":
        item["wrap"] = False


def items_from_flags(flags: Sequence[tuple[str, Any]]) -> list[dict[str, Any]]:
    """Ordered ``(flag, value)`` pairs -> JSON segments; a modifier applies to the segment right before it."""
    items: list[dict[str, Any]] = []
    owner: str | None = None
    seen: set[str] = set()
    for flag, value in flags:
        if flag in SEGMENT_FLAGS:
            items.append(_segment(flag, value))
            owner, seen = flag, set()
            continue
        allowed = MODIFIERS[flag]
        if owner not in allowed:
            after = f"after {owner}" if owner else "before any segment"
            raise CliError(
                f"{flag} applies to the segment right before it, which must be {' or '.join(allowed)}; "
                f"it came {after}"
            )
        if flag in seen:
            raise CliError(f"{flag} is given twice for the same {owner} segment")
        seen.add(flag)
        _modify(items[-1], flag, value, owner)
    return items


def rule_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """``["crop=keep", "fps=1"]`` -> ``{"crop": "keep", "fps": 1}`` (values read as JSON when they parse)."""
    known = {f.name for f in fields(LayoutRules)} - {"name"}
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CliError(f"--rule takes KEY=VALUE; got {pair!r}")
        if key not in known:
            raise CliError(
                f"--rule {key}: unknown LayoutRules field; expected one of {', '.join(sorted(known))}"
            )
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def add_rule_option(p: argparse.ArgumentParser, whose: str = "") -> None:
    """``--rule KEY=VALUE`` (repeatable), read by :func:`rule_overrides`; ``whose`` names what it applies to."""
    p.add_argument(
        "--rule",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override one LayoutRules field{whose}, e.g. --rule crop=keep --rule fps=1 (repeatable)",
    )


def add_model_options(p: argparse.ArgumentParser, tokenizer: bool = True) -> None:
    """``--model``, ``--rule`` and ``--tokenizer``."""
    p.add_argument(
        "--model",
        metavar="MODEL",
        help="the model, required (here or in the spec file / record): "
        + ", ".join(model_names())
        + ", or a Hugging Face model_type or repo id naming one",
    )
    p.add_argument(
        "--model-dir",
        metavar="DIR",
        help="a checkpoint folder (config.json, preprocessor configs, tokenizer.json) read by "
        "mrope.from_pretrained, instead of --model",
    )
    add_rule_option(p)
    p.add_argument(
        "--max-tokens",
        default=str(DEFAULT_MAX_TOKENS),
        help=f"refuse a sequence of more tokens, counted before building (default {DEFAULT_MAX_TOKENS}; 'none')",
    )
    if tokenizer:
        p.add_argument(
            "--tokenizer",
            metavar="TOKENIZER_JSON",
            help="tokenizer.json for text given as words and for Qwen3-VL / GLM-4.1V video timestamps",
        )
    p.add_argument(
        "--convention",
        choices=("released", "transformers5"),
        default=None,
        help="released: the official semantics (default); transformers5: the family's own transformers 5.24 "
        "get_rope_index",
    )
    p.add_argument(
        "--frame-size",
        choices=("display", "coded"),
        default=None,
        help="which frames of a video file the model gets: display (rotated, as transformers' processors "
        "decode them) or coded (as stored: PyAV, transformers' load_video); default: as the --route's video "
        "loader gives them (display, but for decord on Matroska)",
    )
    p.add_argument(
        "--route",
        choices=ROUTE_NAMES,
        default=None,
        help="whose pipeline reads the media: processor (the checkpoint's transformers processors; default), "
        "qwen-vl-utils (the model-card recipe: no EXIF transpose, sample_fps for frame lists) or vllm; "
        "a record's own route is used when this is not given",
    )
    p.add_argument(
        "--chat-template",
        default="auto",
        metavar="auto|none|FILE",
        help="how messages become text: auto (default) renders them with the chat template next to "
        "--tokenizer / in --model-dir when there is one; none never does; or a .jinja file / checkpoint folder",
    )
    p.add_argument(
        "--add-generation-prompt",
        action="store_true",
        help="with a chat template, end with the assistant's generation prompt",
    )


def add_segment_options(p: argparse.ArgumentParser) -> None:
    """The ordered segment flags, their modifiers, ``--spec`` and the model options."""
    seg = p.add_argument_group(
        "segments (in order; a modifier applies to the segment right before it)",
    )
    helps = {
        "--text": ("N|TEXT", "a text run: a token count, or words (needs --tokenizer)"),
        "--image": ("PATH", "an image file, sized by the model's rules"),
        "--image-grid": ("T,H,W", "an image as its encoder patch grid"),
        "--video": ("PATH", "a video file, sampled by the model's rules (metadata only)"),
        "--video-grid": ("T,H,W", "a video as its encoder patch grid"),
    }
    for flag, (metavar, text) in helps.items():
        seg.add_argument(flag, dest="items", action=Ordered, metavar=metavar, help=text)
    mods = {
        "--crop": ("TOP,LEFT,H,W", "crop box in pixels of the --image before it"),
        "--tiles": (
            "COLSxROWS",
            "tile the image before it (a file: InternVL tiling; a grid: COLSxROWS), or slice each frame of "
            "the --video-grid before it (MiniCPM-V, with --thumbnail-grid)",
        ),
        "--thumbnail-grid": (
            "T,H,W",
            "MiniCPM-V: the grid of the thumbnail before the tiles of the --image-grid (or each frame of the "
            "--video-grid) before it",
        ),
        "--origin": ("ROW,COL", "crop origin in merged tokens of the --image-grid before it"),
        "--fps": ("FPS", "sampling rate of the video before it"),
        "--nframes": ("N", "frames to sample from the --video before it"),
        "--second-per-grid": ("S", "seconds per temporal patch of the --video-grid before it"),
    }
    for flag, (metavar, text) in mods.items():
        nargs = "?" if flag == "--tiles" else None
        extra = {"const": ""} if nargs else {}
        seg.add_argument(flag, dest="items", action=Ordered, nargs=nargs, metavar=metavar, help=text, **extra)
    for flag, text in (
        ("--thumbnail", "a thumbnail follows the tiles of the --image-grid before it"),
        ("--generate", "GLM-Image: the --image-grid before it is an image the model will generate"),
        ("--no-wrap", "no vision_start / vision_end (nor timestamps) around the segment before it"),
    ):
        seg.add_argument(flag, dest="items", action=Ordered, nargs=0, help=text)
    p.add_argument(
        "--spec",
        metavar="FILE.json",
        help="read the sequence from a JSON file: the body of POST /v1/positions ({model, segments, rules}) "
        "or a pipeline record (segments or messages); '-' reads stdin",
    )
    add_model_options(p)
