"""The table of supported families (docs/families.md), rendered from the registry (Markdown)."""

from __future__ import annotations

from mrope._rules import LayoutRules
from mrope._spec import RopeSpec
from mrope.models._registry import families

_DEFAULT_RULES = LayoutRules()
_NOTED_FIELDS = ("temporal_merge_size", "row_newline", "num_axes")
"""Rules of single families the table names when a family sets them otherwise than the default."""


def _rules_summary(rules: LayoutRules) -> str:
    parts = [f"`{rules.temporal}` time"]
    if rules.temporal == "seconds":
        parts[0] += f" ({rules.tokens_per_second:g}/s)"
    if rules.temporal == "timestamps":
        text = rules.format_timestamp(1.0)
        parts.append(
            f"`{text}` {rules.timestamp_position} each {'frame' if rules.timestamp_time == 'first' else 'patch'}"
        )
    parts.append(f"patch {rules.patch_size}, merge {rules.merge_size}, temporal {rules.temporal_patch_size}")
    for field in _NOTED_FIELDS:
        value = getattr(rules, field)
        if value != getattr(_DEFAULT_RULES, field):
            parts.append(f"{field} {value}")
    if rules.positions_base != _DEFAULT_RULES.positions_base:
        parts.append(f"positions_base `{rules.positions_base}`")
    return "; ".join(parts)


def _spec_summary(spec: RopeSpec) -> str:
    rotary = (
        f"{spec.rotary_dim}" if spec.rotary_dim == spec.head_dim else f"{spec.rotary_dim} of {spec.head_dim}"
    )
    if spec.rotary_offset:
        rotary += f" from {spec.rotary_offset}"
    scaling = "" if spec.scaling.type == "none" else f", {spec.scaling.type}"
    section = ", ".join(str(s) for s in spec.mrope_section)
    theta = f"{spec.theta:.0e}".replace("e+0", "e").replace("e+", "e")
    return f"{spec.section_layout} ({section}), {spec.pairing}, {rotary}, θ {theta}{scaling}"


def family_table() -> str:
    """The table of supported families (docs/families.md), generated from the registry (Markdown)."""
    rows = [
        "| family | model types | layout rules | rotary (released) | exact against |",
        "|---|---|---|---|---|",
    ]
    for fam in families():
        types = ", ".join(f"`{t}`" for t in fam.model_types)
        rotary = _spec_summary(fam.spec)
        if fam.learned_rotary is not None:
            learned = fam.learned_rotary
            rotary += f"; the other channels: the checkpoint's `{learned.buffer}` (`{learned.table_builder}`)"
        rows.append(f"| `{fam.name}` | {types} | {_rules_summary(fam.rules)} | {rotary} | {fam.exactness} |")
    return "\n".join(rows)


__all__ = ["family_table"]
