"""Golden vectors: the conformance suite ``mrope golden OUT`` writes, built from the registry families.

For every registry family and convention (``"released"``, and ``"transformers5"`` where the family's own
transformers 5.24 ``get_rope_index`` differs), a few prompts in the forms other runtimes take (token ids,
attention mask, token types, grids, seconds per grid, keep masks) with the expected positions ``[A, T]``,
the delta, the first decode positions and, for the basic prompt, a few rows of cos / sin. The file layout
(``manifest.json`` and ``cases.jsonl``) is written out in docs/golden.md; :mod:`mrope._conform` reads it.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from mrope._builder import build_batch, build_positions
from mrope._continuation import continue_positions
from mrope._errors import GoldenError, MRopeError, MRopeWarning
from mrope._positions import Positions, next_positions
from mrope._rules import LayoutRules
from mrope._segments import Image, Text, Video
from mrope.models._registry import get_family, names

FORMAT = "mrope-golden"
VERSION = 1
"""The suite's format name and version (``manifest.json``); a reader refuses other versions."""

CASES_FILE = "cases.jsonl"
MANIFEST_FILE = "manifest.json"
DECODE_STEPS = 3
"""Decode positions per case: those of the first ``DECODE_STEPS`` generated tokens (the first one is
where an off-by-one at the first decode shows)."""

VISION = ("image", "video", "thumbnail")

SUITE_MARKER_IDS = {"slice_start_id": 1500, "slice_end_id": 1501, "newline_id": 1502}
"""Marker ids of the suite's own vocabulary (outside :func:`suite_tokenize`'s 1000..1499), given to the
canvas rule, whose registry family has none of its own (MiniCPM-V 4.7: its config class leaves them
``None`` and they come from a checkpoint's config). Its cases record every id they read in
``inputs.token_ids``."""


def suite_tokenize(text: str) -> list[int]:
    """The suite's stand-in tokenizer (ids 1000..1499, one per character): text ids only need to be text,
    their values never move a position."""
    return [1000 + ord(c) % 500 for c in text]


@dataclasses.dataclass(frozen=True)
class _Prompt:
    """One case's prompt: its kind and what builds its positions under ``rules``."""

    kind: str
    build: Callable[[LayoutRules, str], dict[str, Any]]


def suite_rules(name: str, convention: str) -> LayoutRules:
    """The rules a family's cases are built with: its convention's, plus :data:`SUITE_MARKER_IDS` where
    the canvas rule has none."""
    rules = get_family(name).rules_for(convention)
    if rules.positions_base != "canvas":
        return rules
    return rules.replace(**{k: v for k, v in SUITE_MARKER_IDS.items() if getattr(rules, k) is None})


def _basic_segments(rules: LayoutRules, video: bool) -> list[Any]:
    m, tm = rules.merge_size, rules.temporal_merge_size
    middle = Video(grid=(2 * tm, 2 * m, 2 * m), fps=2.0) if video else Image(grid=(1, 2 * m, 2 * m))
    # the canvas rule's first picture is sliced (two rows of one crop, a thumbnail over them), so its
    # slice markers, the newline between rows and the stretched thumbnail show
    first = (
        Image(grid=(1, 4 * m, 2 * m), tiles=(1, 2), thumbnail_grid=(1, 2 * m, m))
        if rules.positions_base == "canvas"
        else Image(grid=(1, 2 * m, 3 * m))
    )
    return [
        Text(suite_tokenize("look")),
        first,
        Text(suite_tokenize("and")),
        middle,
        Text(suite_tokenize("say?")),
    ]


def _video_segments(rules: LayoutRules, groups: int, fps: float) -> list[Any]:
    m, tm = rules.merge_size, rules.temporal_merge_size
    return [
        Text(suite_tokenize("clip")),
        Video(grid=(groups * tm, m, m), fps=fps),
        Text(suite_tokenize("what?")),
    ]


def _build(segments: list[Any], rules: LayoutRules, name: str) -> Positions:
    with warnings.catch_warnings():  # the fractional-time case shares t offsets on purpose
        warnings.simplefilter("ignore", MRopeWarning)
        return build_positions(segments, model=name, rules=rules, tokenizer=suite_tokenize)


def _inputs(p: Positions) -> dict[str, Any]:
    """A sequence's inputs as other runtimes take them (one row, no padding)."""
    out: dict[str, Any] = {
        "input_ids": p.input_ids.tolist(),
        "attention_mask": [1] * p.num_tokens,
        "mm_token_type_ids": p.mm_token_type_ids.tolist(),
        "image_grid_thw": p.image_grid_thw.reshape(-1, 3).tolist(),
        "video_grid_thw": p.video_grid_thw.reshape(-1, 3).tolist(),
    }
    if len(p.video_grid_thw):
        out["second_per_grid_ts"] = [float(np.float32(s)) for s in p.second_per_grid_ts]
    return out


def _expected(ids: np.ndarray, delta: int | float, valid: int) -> dict[str, Any]:
    decode = next_positions(delta, valid, DECODE_STEPS)[:1]
    return {
        "positions": ids.tolist(),
        "delta": delta,
        "decode": np.broadcast_to(decode, (ids.shape[0], DECODE_STEPS)).tolist(),
    }


def _one(make: Callable[[LayoutRules], list[Any]]) -> Callable[[LayoutRules, str], dict[str, Any]]:
    """A case of one prompt, ``make(rules)``."""

    def build(rules: LayoutRules, name: str) -> dict[str, Any]:
        p = _build(make(rules), rules, name)
        return {"inputs": _inputs(p), "expected": _expected(p.ids, p.delta, p.num_tokens), "_positions": p}

    return build


def _padded(rules: LayoutRules, name: str) -> dict[str, Any]:
    """The basic prompt left-padded in a batch with a longer one: pad slots hold the convention's value."""
    video = rules.video_support != "none"
    short = _basic_segments(rules, video)
    batch = build_batch(
        [short, [*short, Text(suite_tokenize("longer"))]],
        model=name,
        rules=rules,
        padding_side="left",
        tokenizer=suite_tokenize,
        pad_token_id=0,
    )
    p = batch.sequences[0]
    inputs = _inputs(p)
    inputs["input_ids"] = batch.input_ids[0].tolist()
    inputs["attention_mask"] = batch.attention_mask[0].astype(np.int64).tolist()
    inputs["mm_token_type_ids"] = batch.mm_token_type_ids[0].tolist()
    return {"inputs": inputs, "expected": _expected(batch.ids[:, 0], p.delta, p.num_tokens)}


def _pruned(rules: LayoutRules, name: str) -> dict[str, Any]:
    """The basic prompt with a seeded keep mask on every vision block: the kept tokens' positions."""
    segments = _basic_segments(rules, rules.video_support != "none")
    full = _build(segments, rules, name)
    rng = np.random.default_rng(0)
    keep = np.ones(full.num_tokens, dtype=bool)
    pruned = []
    for i, seg in enumerate(segments):
        cols = [np.arange(s.start, s.stop) for s in full.spans if s.index == i and s.kind in VISION]
        if not cols:
            pruned.append(seg)
            continue
        mask = rng.random(sum(c.size for c in cols)) < 0.5
        keep[np.concatenate(cols)] = mask
        pruned.append(dataclasses.replace(seg, keep=mask))
    p = _build(pruned, rules, name)
    inputs = _inputs(full)
    inputs["keep"] = keep.astype(np.int64).tolist()
    return {"inputs": inputs, "expected": _expected(p.ids, p.delta, p.num_tokens)}


def _continued(rules: LayoutRules, name: str) -> dict[str, Any]:
    """A second turn after the basic prompt and six generated tokens: the turn's positions, the inputs
    being the whole conversation and ``offset`` the turn's first token."""
    first = _build(_basic_segments(rules, rules.video_support != "none"), rules, name)
    m = rules.merge_size
    second = [Text(suite_tokenize("next")), Image(grid=(1, 2 * m, 2 * m)), Text(suite_tokenize("ok"))]
    generated = suite_tokenize("answer")
    turn = continue_positions(first, second, generated=len(generated), tokenizer=suite_tokenize)
    whole = _build(
        _basic_segments(rules, rules.video_support != "none") + [Text(generated), *second], rules, name
    )
    inputs = _inputs(whole)
    inputs["offset"] = turn.offset
    t = turn.positions  # its delta counts the turn's tokens; the case's, the whole conversation's
    return {"inputs": inputs, "expected": _expected(t.ids, t.delta - turn.offset, turn.offset + t.num_tokens)}


def _prompts(rules: LayoutRules) -> list[_Prompt]:
    video = rules.video_support != "none"
    out = [
        _Prompt("basic", _one(lambda r: _basic_segments(r, video))),
        _Prompt("padding", _padded),
        _Prompt("pruned", _pruned),
        _Prompt("continued", _continued),
    ]
    if video:
        out += [
            _Prompt("long-video", _one(lambda r: _video_segments(r, 24, 2.0))),
            _Prompt("fractional-time", _one(lambda r: _video_segments(r, 26, 50.0))),
        ]
    return out


def _rope_rows(p: Positions, spec: Any) -> dict[str, Any]:
    """cos / sin of a few tokens (the first, the first vision token, the last) from mrope's torch path."""
    import torch

    from mrope.ops import cos_sin

    vision = [s.start for s in p.spans if s.kind in VISION]
    rows = sorted({0, vision[0] if vision else 0, p.num_tokens - 1})
    cos, sin = cos_sin(torch.from_numpy(np.ascontiguousarray(p.ids[:, rows])), spec)
    return {"rows": rows, "cos": cos.tolist(), "sin": sin.tolist()}


_LEARNED_REASON = (
    "half of its rotation is a checkpoint tensor (its learned_rotary), so no cos / sin without the "
    "checkpoint, and its decode tokens are (t, 0, 0), which the suite's decode rows (t on every axis) do "
    "not hold; its positions are checked against its released code in mrope's own tests"
)


def _left_out(name: str, convention: str) -> dict[str, str]:
    """The not-applicable entry of a whole family and convention (every kind)."""
    return {"case": f"{name}/{convention}/*", "family": name, "convention": convention, "kind": "*"}


def conventions(name: str) -> tuple[str, ...]:
    """The conventions a family's cases come in: ``released``, and ``transformers5`` where it differs."""
    return ("released", "transformers5") if get_family(name).transformers5 else ("released",)


def build_cases(with_rope: bool = True) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Every case of the suite, and the (family, convention, kind) left out with the family's reason.

    Args:
        with_rope: add cos / sin rows to the basic cases (needs torch).
    """
    cases, skipped = [], []
    for name in names():
        family = get_family(name)
        if family.learned_rotary is not None:
            skipped += [
                {**_left_out(name, convention), "reason": _LEARNED_REASON} for convention in conventions(name)
            ]
            continue
        for convention in conventions(name):
            rules = suite_rules(name, convention)
            own_ids = _token_ids(rules) if rules != family.rules_for(convention) else None
            for prompt in _prompts(rules):
                head = {"case": f"{name}/{convention}/{prompt.kind}", "family": name}
                head |= {"convention": convention, "kind": prompt.kind}
                try:
                    body = prompt.build(rules, name)
                except MRopeError as exc:
                    skipped.append({**head, "reason": " ".join(str(exc).split())})
                    continue
                p = body.pop("_positions", None)
                if own_ids is not None:
                    body["inputs"]["token_ids"] = own_ids
                if with_rope and p is not None and prompt.kind == "basic":
                    body["expected"]["rope"] = _rope_rows(p, family.spec)
                cases.append({**head, **body})
    return cases, skipped


def _spec_dict(name: str) -> dict[str, Any]:
    spec = get_family(name).spec
    return {
        "head_dim": spec.head_dim,
        "rotary_dim": spec.rotary_dim,
        "rotary_offset": spec.rotary_offset,
        "theta": spec.theta,
        "mrope_section": list(spec.mrope_section),
        "section_layout": spec.section_layout,
        "pairing": spec.pairing,
        "attention_factor": spec.attention_factor(),
    }


def _token_ids(rules: LayoutRules) -> dict[str, int]:
    """The token ids ``rules`` read (those set; the ids a runtime recognises in ``input_ids``)."""
    ids = {f.name: getattr(rules, f.name) for f in dataclasses.fields(rules) if f.name.endswith("_id")}
    return {k: v for k, v in ids.items() if v is not None}


def _family_dict(name: str) -> dict[str, Any]:
    """A family's manifest entry: its conventions, rotary spec, merge sizes and the token ids its cases
    read (:func:`suite_rules`)."""
    rules = suite_rules(name, "released")
    entry = {
        "conventions": list(conventions(name)),
        "spec": _spec_dict(name),
        "merge_size": rules.merge_size,
        "temporal_merge_size": rules.temporal_merge_size,
        "token_ids": _token_ids(rules),
    }
    learned = get_family(name).learned_rotary
    if learned is not None:  # spec is then only the formula half of the rotation
        entry["learned_rotary"] = {"buffer": learned.buffer, "table": learned.table_builder}
    return entry


def write_suite(out: str | Path, *, with_rope: bool = True) -> dict[str, Any]:
    """Write the suite to the folder ``out`` (created; files replaced) and return its manifest.

    Raises:
        GoldenError: ``out`` exists and is not a folder, or cannot be written.
    """
    from mrope import __version__

    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise GoldenError(f"golden: {out} exists and is not a folder; give a folder for the suite")
    cases, skipped = build_cases(with_rope)
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "mrope": __version__,
        "cases_file": CASES_FILE,
        "num_cases": len(cases),
        "decode_steps": DECODE_STEPS,
        "cos_sin": with_rope,
        "families": {n: _family_dict(n) for n in names()},
        "not_applicable": skipped,
    }
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / CASES_FILE, "w", encoding="utf-8") as f:
            for case in cases:
                f.write(json.dumps(case, separators=(",", ":")) + "\n")
        (folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        raise GoldenError(f"golden: cannot write {out}: {exc.strerror or exc}") from None
    return manifest


def read_suite(path: str | Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The manifest and the cases (by name) of the suite in the folder ``path``.

    Raises:
        GoldenError: no manifest, another format or version, or a malformed case line.
    """
    folder = Path(path)
    try:
        manifest = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GoldenError(f"{path}: not a golden suite folder ({MANIFEST_FILE}: {exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise GoldenError(f"{path}/{MANIFEST_FILE}: format must be {FORMAT!r}")
    if manifest.get("version") != VERSION:
        raise GoldenError(
            f"{path}: suite version {manifest.get('version')!r}; this mrope reads version {VERSION}"
        )
    cases = {}
    for number, case in json_lines(folder / str(manifest.get("cases_file", CASES_FILE))):
        if not isinstance(case, dict) or not isinstance(case.get("case"), str) or "expected" not in case:
            raise GoldenError(f"{path}: case line {number} has no 'case' name or no 'expected'")
        cases[case["case"]] = case
    return manifest, cases


def json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise GoldenError(f"cannot read {path}: {exc}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError as exc:
            raise GoldenError(f"{path} line {number}: not JSON ({exc})") from None


__all__ = [
    "DECODE_STEPS",
    "FORMAT",
    "VERSION",
    "build_cases",
    "json_lines",
    "read_suite",
    "suite_tokenize",
    "write_suite",
]
