"""The sequence a ``positions`` or ``plot`` command describes: from segment flags or a ``--spec`` file."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrope._chat import find_chat_template
from mrope._cli._args import CliError, items_from_flags, positive_int, rule_overrides
from mrope._errors import MRopeError
from mrope._position_sets import position_set_rules
from mrope._positions import Positions
from mrope._segments import Audio, Image, Segment, Text, Video
from mrope.pipeline import Preprocessor
from mrope.schema import RequestError
from mrope.schema._fields import require_model
from mrope.schema._parse import parse_layer_sets
from mrope.schema._sets import sets_family
from mrope.schema._text import load_tokenizer


@dataclass(frozen=True)
class Built:
    """Positions plus what the summary table says about them.

    Attributes:
        positions: the built positions.
        model: the model used (a name, or ``family (checkpoint folder)``).
        labels: one short description per segment (a file name, a grid, a token count).
        sets: with ``--layer-sets`` (or a spec's ``layer_sets``): every position set by name, as
            :func:`mrope.build_position_sets` lays them out (``positions`` is the first); else empty.
        pattern: the layer pattern of ``sets`` (:attr:`mrope.LayerSets.pattern`); else empty.
    """

    positions: Positions
    model: str
    labels: tuple[str, ...]
    sets: dict[str, Positions] = field(default_factory=dict)
    pattern: tuple[str, ...] = ()


def read_json(path: str) -> Any:
    """A JSON file (``-``: stdin), or a :class:`CliError` naming the file and the place of a syntax error."""
    name = "stdin" if path == "-" else path
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {name}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(
            f"{name} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None


def tokenizer_from_arg(path: str | None) -> Any:
    """``--tokenizer`` -> a loaded tokenizer (``None`` without the option)."""
    if path is None:
        return None
    if not os.path.isfile(path):
        raise CliError(f"--tokenizer {path!r} is not a file (expected a tokenizer.json)")
    return load_tokenizer(path)


def model_from_args(option: str | None, fallback: object = None, model_dir: str | None = None) -> Any:
    """``--model`` / ``--model-dir`` (or the spec file's / record's model): required, there is no default
    model. An alias (a Hugging Face model_type or repo id) gives the canonical name; ``--model-dir`` a
    checkpoint folder read by :func:`mrope.from_pretrained` (its values, and its tokenizer.json)."""
    if model_dir is not None:
        if option is not None:
            raise CliError("give --model or --model-dir, not both")
        from mrope._checkpoint import from_pretrained

        try:
            return from_pretrained(model_dir)
        except MRopeError as exc:
            raise CliError(f"--model-dir {model_dir!r}: {exc}") from None
    chosen = option if option is not None else fallback
    where = "--model" if option is not None else "the spec's model"
    try:
        return require_model(chosen, where, missing="no model given: pass --model (or --model-dir)")
    except RequestError as exc:
        raise CliError(str(exc)) from None


def data_options(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`mrope.pipeline.Preprocessor` options of ``--convention``, ``--frame-size``, ``--route``,
    ``--chat-template`` and ``--add-generation-prompt`` (``auto``: the template next to ``--tokenizer``
    or in ``--model-dir``, when there is one)."""
    choice = getattr(args, "chat_template", "auto")
    if choice == "auto":
        source = getattr(args, "tokenizer", None) or getattr(args, "model_dir", None)
        template = find_chat_template(source) if source else None
    elif choice == "none":
        template = None
    else:
        template = find_chat_template(choice)
        if template is None:
            raise CliError(
                f"--chat-template {choice}: no chat template there (a .jinja file or a checkpoint folder)"
            )
    return {
        "convention": getattr(args, "convention", None),
        "frame_size": getattr(args, "frame_size", None),
        "route": getattr(args, "route", None),
        "chat_template": template,
        "add_generation_prompt": bool(getattr(args, "add_generation_prompt", False)),
    }


def model_name(model: Any) -> str:
    """The name printed for a model: a name as is, a checkpoint as ``family (folder)``."""
    if isinstance(model, str):
        return model
    source = getattr(model, "source", "registry")
    return model.name if source in ("registry", "", None) else f"{model.name} ({source})"


def max_tokens_from_arg(text: str) -> int | None:
    """``--max-tokens``: an int >= 1, or ``none`` for no limit."""
    return None if text.strip().lower() == "none" else positive_int(text, "--max-tokens")


def _label(item: Any) -> str:
    """A short description of one JSON segment."""
    if not isinstance(item, dict):
        return ""
    if item.get("path") is not None:
        return os.path.basename(str(item["path"])) or str(item["path"])
    if item.get("grid") is not None:
        return "grid " + "x".join(str(v) for v in item["grid"])
    if item.get("height") is not None and item.get("width") is not None:
        return f"{item['height']}x{item['width']} px"
    if item.get("tokens") is not None:
        return f"{item['tokens']} tokens"
    if item.get("ids") is not None:
        return f"{len(item['ids'])} ids"
    if isinstance(item.get("text"), str):
        text = " ".join(item["text"].split())
        return repr(text if len(text) <= 18 else text[:17] + "…")
    return ""


def _segment_label(seg: Segment) -> str:
    if isinstance(seg, Text):
        return f"{seg.num_tokens} tokens"
    if isinstance(seg, Audio):
        return f"audio {seg.mel_frames} frames" if seg.mel_frames is not None else "audio"
    kind = "image" if isinstance(seg, Image) else "video" if isinstance(seg, Video) else "?"
    return f"{kind} " + "x".join(str(v) for v in seg.grid)


def build_from_args(args: argparse.Namespace) -> Built:
    """The positions of the sequence given by segment flags or ``--spec`` (plus ``--model``, ``--rule``,
    ``--tokenizer``)."""
    flags = getattr(args, "items", None) or []
    if args.spec is not None and flags:
        raise CliError("give the sequence as segment flags or as --spec FILE.json, not both")
    if args.spec is not None:
        record = read_json(args.spec)
        if not isinstance(record, dict):
            raise CliError(f"{args.spec}: expected a JSON object with 'segments' or 'messages'")
        base_dir = None if args.spec == "-" else os.path.dirname(os.path.abspath(args.spec))
    elif flags:
        record = {"segments": items_from_flags(flags)}
        base_dir = None
    else:
        raise CliError("no segments: give --text / --image / --video ... in order, or --spec FILE.json")
    model = model_from_args(args.model, record.get("model"), getattr(args, "model_dir", None))
    tokenizer = tokenizer_from_arg(getattr(args, "tokenizer", None))
    asked = parse_layer_sets(record.get("layer_sets"))
    if getattr(args, "layer_sets", False) and asked is None:
        asked = parse_layer_sets(True)
    pre = Preprocessor(
        model=model,
        rules=rule_overrides(args.rule) or None,
        tokenizer=tokenizer,
        base_dir=base_dir,
        max_tokens=max_tokens_from_arg(args.max_tokens),
        layer_sets=asked,
        **data_options(args),
    )
    family = sets_family(model, asked)
    sets: dict[str, Positions] = {}
    try:
        segments, rules = pre.segments(record)
        if family is not None:
            for name, set_rules in position_set_rules(family, rules).items():
                sets[name] = pre.build(segments, set_rules)  # type: ignore[arg-type]
            positions = next(iter(sets.values()))
        else:
            positions = pre.build(segments, rules)
    except MRopeError as exc:
        if tokenizer is None and "tokenizer" in str(exc):
            raise CliError(f"{exc} [on the command line: --tokenizer TOKENIZER_JSON]") from None
        raise
    items = record.get("segments")
    if isinstance(items, list) and len(items) == len(segments):
        labels = tuple(_label(item) for item in items)
    else:
        labels = tuple(_segment_label(seg) for seg in segments)
    pattern = family.layer_sets.pattern if family is not None else ()
    return Built(positions=positions, model=model_name(model), labels=labels, sets=sets, pattern=pattern)
