"""vLLM v0.33.0's and v0.34.0's model runners restated: the M-RoPE positions each writes for a request
scheduled in chunks, from its stored prompt positions and its delta."""

from __future__ import annotations

import numpy as np


def v033_schedule(prompt: np.ndarray, delta: int, chunks: list[int]) -> np.ndarray:
    """v0.33.0 ``_calc_mrope_positions`` (gpu_model_runner.py line 2542): each chunk's part before
    ``num_prompt_tokens`` copied from the prompt's positions, the rest from
    ``get_next_input_positions_tensor`` (mrope.py line 556): ``delta + context_len + i`` on every row."""
    out, done, n_prompt = [], 0, prompt.shape[1]
    for size in chunks:
        prompt_part = max(0, min(size, n_prompt - done))
        out.append(prompt[:, done : done + prompt_part])
        context = done + prompt_part
        tail = np.arange(delta + context, delta + context + size - prompt_part)
        out.append(np.broadcast_to(tail, (3, tail.size)))
        done += size
    return np.concatenate(out, axis=1)


def v034_schedule(prompt: np.ndarray, delta: int, chunks: list[int]) -> np.ndarray:
    """v0.34.0 ``_prepare_rope_positions_kernel`` (gpu/mm/rope.py line 145): a chunk that starts while
    ``num_computed < prefill_len`` reads the stored positions at ``num_computed + i``; one that starts
    after writes ``num_computed + i + delta`` on each of the model's rows. Stored as int32 (line 46)."""
    stored = prompt.astype(np.int32)
    out, done = [], 0
    for size in chunks:
        steps = np.arange(done, done + size)
        if done < prompt.shape[1]:
            out.append(stored[:, steps].astype(np.int64))
        else:
            out.append(np.broadcast_to(steps + np.int32(delta), (3, size)).astype(np.int64))
        done += size
    return np.concatenate(out, axis=1)
