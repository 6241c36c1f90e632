"""The public surface, pinned: which modules are public and the names each exports.

A module is public when no part of its dotted path starts with an underscore; everything else is private
and may move freely. Each public module's ``__all__`` is written out here, so a change to the surface is
a visible diff of this file.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import mrope
import mrope.service

PUBLIC: dict[str, list[str]] = {
    "mrope": [
        "ApplyError",
        "Audio",
        "Batch",
        "ConversationState",
        "Image",
        "LayerSets",
        "LayoutError",
        "LayoutRules",
        "MRopeError",
        "MRopeWarning",
        "MediaError",
        "PackedBatch",
        "PackedRow",
        "PackingError",
        "PatchError",
        "PositionProgram",
        "Positions",
        "ProgramError",
        "RopeScaling",
        "RopeSpec",
        "Span",
        "SpecError",
        "Text",
        "TokenError",
        "Turn",
        "Video",
        "VideoChunk",
        "VideoRope",
        "apply_mrope",
        "audio_tokens",
        "build_batch",
        "build_position_sets",
        "build_positions",
        "cache_info",
        "clear_caches",
        "continue_positions",
        "conversation_state",
        "cos_sin",
        "count_tokens",
        "draft_depths",
        "draft_positions",
        "evs_mask",
        "evs_retained_tokens",
        "evs_rule",
        "from_pretrained",
        "generation_index",
        "get_rope_index",
        "latent_positions",
        "layer_cos_sin",
        "live_video_chunk",
        "next_positions",
        "numpy_rope_index",
        "pack",
        "rerotate",
        "rewind",
        "rules_digest",
        "text_positions",
        "tree_attention_mask",
        "vidcom2_mask",
        "vidcom2_retained_tokens",
        "vidcom2_rule",
    ],
    "mrope.integrations": [],
    "mrope.integrations.transformers": [
        "APPLY_FUNCTION",
        "CONVENTIONS",
        "DEFAULT_CONVENTION",
        "MaskRule",
        "NotARotationError",
        "Rotation",
        "is_patched",
        "model_inputs",
        "model_rules",
        "patch",
        "patch_info",
        "pruned_video_inputs",
        "unpatch",
    ],
    "mrope.media": [
        "AlignedCrop",
        "AudioInfo",
        "FrameSize",
        "MediaKind",
        "MediaRecord",
        "ROUTES",
        "Reader",
        "Route",
        "RouteName",
        "TilePlan",
        "VideoInfo",
        "crop_segment",
        "decode_frames",
        "detect_media_kind",
        "ernie_frame_indices",
        "get_route",
        "glm4v_frame_indices",
        "has_audio_stream",
        "image_grid",
        "image_size",
        "load_audio",
        "load_frames",
        "load_image",
        "load_video",
        "open_url",
        "plan_tiles",
        "probe_audio",
        "probe_video",
        "qwen3_vl_frame_indices",
        "sample_fps",
        "sample_frame_indices",
        "sampled_times",
        "sizing_sources",
        "smart_resize",
        "smart_resize_clip",
        "smart_resize_edges",
        "smart_resize_tokens",
    ],
    "mrope.models": [
        "CONVENTIONS",
        "CheckpointChoice",
        "Convention",
        "FAMILY_MODULES",
        "LearnedRotary",
        "ModelFamily",
        "ModelLike",
        "PRESET_NAMES",
        "SCHEME_NAMES",
        "VIDEO_MODEL_NAMES",
        "families",
        "family_for_model_type",
        "family_table",
        "get_family",
        "model_types",
        "names",
        "resolve_rules",
        "resolve_spec",
        "resolve_tokenizer",
        "schemes",
        "spec_from_config",
        "video_rope",
    ],
    "mrope.ops": [
        "ANGLE_PRECISIONS",
        "AnglePrecision",
        "BACKENDS",
        "Backend",
        "LAYOUTS",
        "Layout",
        "PairTable",
        "apply_mrope",
        "cos_sin",
        "expand_program",
        "golden_gate_positions",
        "golden_gate_table",
        "layer_cos_sin",
        "pair_table",
        "rerotate",
    ],
    "mrope.packing": [
        "PACKED_INPUT",
        "PackedBatch",
        "PackedCollator",
        "PackedInput",
        "PackedRow",
        "PaddedPack",
        "SHARD_LAYOUTS",
        "ShardedRow",
        "check_packed_input",
        "efficiency",
        "first_fit_decreasing",
        "pack",
        "pad_rows",
        "shard",
        "shard_samples",
        "stream_rows",
    ],
    "mrope.pipeline": [
        "DEFAULT_MAX_TOKENS",
        "JobError",
        "Preprocessor",
        "QWEN_TURN",
        "RESULT_COLUMNS",
        "RecordError",
        "pack_batch",
        "pack_efficiency",
        "plain",
        "process_batch",
        "process_record",
        "record_positions",
    ],
    "mrope.schema": [
        "AudioSegment",
        "ConversationStateBody",
        "ImageGrid",
        "ImagePath",
        "ImageSegment",
        "ImageSize",
        "KeepMask",
        "MEDIA_NONE",
        "MediaAccess",
        "MediaUrl",
        "Message",
        "MessageText",
        "PositionsRequest",
        "Record",
        "RequestError",
        "RulesOverrides",
        "TextSegment",
        "TilingOptions",
        "VideoAudio",
        "VideoFrames",
        "VideoGrid",
        "VideoPath",
        "VideoSegment",
        "message_segments",
        "parse_record",
        "parse_request",
        "parse_segments",
        "to_segments",
    ],
    "mrope.service": ["HttpToolsProtocol", "Settings", "create_app", "run"],
    "mrope.service.app": ["app", "create_app"],
    "mrope.testing": [
        "DecayCurve",
        "ROW_NAMES",
        "RowResult",
        "SchemeComparison",
        "SchemeResult",
        "ValidationError",
        "ValidationReport",
        "assert_crop_invariant",
        "assert_frame_order_invariant",
        "assert_prefill_decode_consistent",
        "assert_tile_invariant",
        "assert_time_aligned",
        "assert_translation_invariant",
        "compare_schemes",
        "rope_scores",
        "tiny_config",
        "tiny_model",
        "validate",
    ],
}


def _all_modules() -> set[str]:
    found = {"mrope", "mrope.service"}
    for package in (mrope, mrope.service):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            found.add(info.name)
    return found


def test_the_public_modules_are_exactly_these() -> None:
    public = {m for m in _all_modules() if not any(part.startswith("_") for part in m.split(".")[1:])}
    assert sorted(public) == sorted(PUBLIC)


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_each_public_module_exports_exactly_its_names(module: str) -> None:
    mod = importlib.import_module(module)
    assert sorted(getattr(mod, "__all__", None) or []) == PUBLIC[module]
    for name in PUBLIC[module]:
        assert getattr(mod, name) is not None, f"{module}.{name} is in __all__ but does not resolve"


def test_a_changed_surface_fails_the_pin() -> None:
    """The control: a name added to ``__all__`` is caught."""
    mrope.__all__.append("not_a_name")
    try:
        with pytest.raises(AssertionError):
            test_each_public_module_exports_exactly_its_names("mrope")
    finally:
        mrope.__all__.remove("not_a_name")
