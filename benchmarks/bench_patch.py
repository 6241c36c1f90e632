"""Benchmark: prefill of a patched transformers model against the same model unpatched, same process.

For each family, two tiny random-weight models with identical weights (``mrope.testing._tiny``:
hidden 64, 2 layers, the real vocabulary) are built; one is patched
(``mrope.integrations.transformers.patch``), the other is not. Both run the same prefill, round-robin
timed (``_timing.compare``): the model computes its own positions (``get_rope_index``: transformers' loop vs
mrope's) and rotates q and k (``Qwen*RotaryEmbedding`` + ``apply_rotary_pos_emb`` vs ``apply_mrope``).
Prompt: text, an image, text, a video, text (``--scale`` sets the grids), batch 2 with left padding,
no pixels (the vision tower is not patched; placeholder tokens keep their embeddings), logits of the last
token only (``logits_to_keep=1``, as generate does).

Prints per family: tokens, median ms unpatched / patched, the ratio (unpatched / patched, > 1 means the
patched model is faster), ``get_rope_index`` alone (the model's own vs the patched one), the largest
logit difference, and how long ``patch()`` itself takes (its
probes). A tiny model is mostly rotary and position overhead; on a real model the same absolute saving
is a small fraction of the prefill.

Run: ``python benchmarks/bench_patch.py`` (CPU), ``python benchmarks/bench_patch.py --device cuda``
(the Triton kernel), ``--families qwen2-vl --repeat 5`` for a quick run.
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import sys
import time
from collections.abc import Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import compare  # noqa: E402

FAMILIES = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "glm-4.1v")


def _tokenize(text: str) -> list[int]:
    return [1000 + ord(c) % 500 for c in text]


def tokenize_words(text: str) -> list[int]:
    """One token a word (``_tokenize`` takes one a character): the same prompt in fewer tokens, for
    ``gpu_check.py --dry-run``, where every token costs interpreted kernel programs."""
    return [1000 + sum(map(ord, word)) % 500 for word in text.split()]


def prompt(
    model, family: str, scale: int, device: torch.device, tokenizer: Callable[[str], list[int]] | None = None
) -> dict[str, torch.Tensor]:
    """Forward kwargs (no position_ids: the model computes its own) for a batch of two prompts; ``tokenizer``
    turns their text (and the video timestamps of families that write them) into ids (default: one token a
    character)."""
    import mrope
    from mrope.integrations.transformers import model_inputs, model_rules

    tokenizer = tokenizer or _tokenize

    rules = model_rules(model)
    m = rules.merge_size
    long = [
        mrope.Text(tokenizer("a question about the picture " * 2)),
        mrope.Image(grid=(1, 2 * m * scale, 3 * m * scale)),
        mrope.Text(tokenizer("and the clip")),
        mrope.Video(grid=(4, 2 * m * scale, 2 * m * scale), fps=2.0),
        mrope.Text(tokenizer("what happens?")),
    ]
    short = [mrope.Text(tokenizer("hello")), mrope.Image(grid=(1, 2 * m * scale, 2 * m * scale))]
    batch = mrope.build_batch([long, short], model=family, rules=rules, tokenizer=tokenizer)
    kw = model_inputs(batch)
    kw.pop("position_ids")
    return {k: v.to(device) for k, v in kw.items()}


def run_family(
    family: str,
    device: torch.device,
    dtype: torch.dtype,
    scale: int,
    repeat: int,
    tokenizer: Callable[[str], list[int]] | None = None,
    warmup: int = 2,
) -> str:
    """One markdown row: ``family``'s prefill unpatched vs patched (``tokenizer``: see :func:`prompt`;
    ``warmup``: untimed calls of each path before the timed ones)."""
    from mrope.integrations.transformers import patch
    from mrope.testing import tiny_model

    plain = tiny_model(family, dtype=dtype).to(device)
    patched = copy.deepcopy(plain)
    t0 = time.perf_counter()
    patch(patched)
    patch_ms = (time.perf_counter() - t0) * 1e3
    kw = prompt(plain, family, scale, device, tokenizer)

    def forward(model):
        def call():
            model.model.rope_deltas = None
            with torch.no_grad():
                return model(**kw, use_cache=False, logits_to_keep=1).logits

        return call

    def positions(model):
        keys = ("input_ids", "mm_token_type_ids", "image_grid_thw", "video_grid_thw", "attention_mask")
        args = {k: kw[k] for k in keys if k in kw}
        return lambda: model.model.get_rope_index(**args)

    diff = (forward(patched)() - forward(plain)()).abs().max().item()
    times = compare(
        {
            "unpatched": forward(plain),
            "patched": forward(patched),
            "positions unpatched": positions(plain),
            "positions patched": positions(patched),
        },
        device=device,
        repeat=repeat,
        warmup=warmup,
    )
    tokens = kw["input_ids"].shape[1]
    ratio = times["unpatched"] / times["patched"]
    return (
        f"| {family} | 2 x {tokens} | {times['unpatched'] * 1e3:.2f} | {times['patched'] * 1e3:.2f} | "
        f"{ratio:.2f}x | {times['positions unpatched'] * 1e3:.2f} / {times['positions patched'] * 1e3:.2f} | "
        f"{diff:.1e} | {patch_ms:.0f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--families", nargs="+", default=list(FAMILIES))
    parser.add_argument(
        "--scale", type=int, default=4, help="grid scale: image (1, 2ms, 3ms), video (4, 2ms, 2ms)"
    )
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    dtype = getattr(torch, args.dtype)
    import transformers

    where = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(
        f"bench_patch: {where}, torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{args.dtype}, threads {torch.get_num_threads()}, repeat {args.repeat}\n"
    )
    print(
        "| family | tokens | unpatched ms | patched ms | ratio | get_rope_index ms (transformers / mrope) "
        "| max logit diff | patch() ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for family in args.families:
        print(run_family(family, device, dtype, args.scale, args.repeat), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
