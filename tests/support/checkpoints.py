"""Checkpoint folders for tests: the released Qwen2.5-VL values (no hub is reachable, so tests write them).

One copy of the released fields, shared by the loader, CLI, service and registry tests; a test that needs
a fine-tune's values changes its own copy (:func:`qwen2_5_vl_config`).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

QWEN2_5_VL_CONFIG: dict[str, Any] = {  # Qwen/Qwen2.5-VL-7B-Instruct config.json: the fields mrope reads
    "model_type": "qwen2_5_vl",
    "hidden_size": 3584,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "rope_theta": 1000000.0,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_config": {
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "tokens_per_second": 2,
    },
}


QWEN2_5_VL_PREPROCESSOR: dict[str, Any] = {  # its preprocessor_config.json, the folder's only processor file
    "image_processor_type": "Qwen2VLImageProcessor",
    "min_pixels": 3136,
    "max_pixels": 12845056,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
}


QWEN3_VL_CONFIG: dict[
    str, Any
] = {  # Qwen/Qwen3-VL-8B-Instruct config.json (5.x form): the fields mrope reads
    "model_type": "qwen3_vl",
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "text_config": {
        "model_type": "qwen3_vl_text",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "head_dim": 128,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 5000000,
            "mrope_section": [24, 20, 20],
            "mrope_interleaved": True,
        },
    },
    "vision_config": {"patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2},
}
QWEN3_VL_VIDEO_PREPROCESSOR: dict[str, Any] = {  # its video_preprocessor_config.json
    "video_processor_type": "Qwen3VLVideoProcessor",
    "size": {"shortest_edge": 4096, "longest_edge": 25165824},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "fps": 2,
    "min_frames": 4,
    "max_frames": 768,
    "do_sample_frames": True,
}


def qwen2_5_vl_config(tokens_per_second: int = 2, **extra: Any) -> dict[str, Any]:
    """A fresh copy of the released config, with a fine-tune's ``tokens_per_second`` and extra fields."""
    config = copy.deepcopy(QWEN2_5_VL_CONFIG)
    config["vision_config"]["tokens_per_second"] = tokens_per_second
    config.update(extra)
    return config


def write_checkpoint(folder: Path, config: dict[str, Any], **files: dict[str, Any]) -> Path:
    """Write ``config.json`` and ``<name>.json`` for each keyword (``preprocessor_config={...}``)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    for name, data in files.items():
        (folder / f"{name}.json").write_text(json.dumps(data))
    return folder
