"""Long text tokenized a piece at a time (``mrope.schema._text.tokenize``) against the tokenizer on the whole
text, in the same process: a byte-level BPE (GPT-2 / Qwen style) trained here on random words, and the
peak RSS each way (measured in a child process per way, since the tokenizer's memory is Rust's; Linux).

    python benchmarks/bench_text_pieces.py [--chars 2000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from mrope._tokenizer import encode_text
from mrope.schema._text import tokenize

WORDS = ["hello", "world", "foo", "bar", "12", "x", "über", "  ", "\n", "\n\n", "!", "?", "ab", "cd"]


def text_of(chars: int) -> str:
    rng = random.Random(0)
    parts, size = [], 0
    while size < chars:
        part = rng.choice(WORDS) + rng.choice([" ", "", "  ", "\t", " "])
        parts.append(part)
        size += len(part)
    return "".join(parts)[:chars]


def bpe(text: str) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text[:200_000]], trainer)
    return tok


def child(way: str, chars: int) -> None:
    """Tokenize one way and print the peak RSS in MiB (run in its own process)."""
    text = text_of(chars)
    tok = bpe(text)
    ids = encode_text(tok, text) if way == "whole" else tokenize(tok, text, "bench")
    with open("/proc/self/status") as fh:  # VmHWM starts afresh at exec (ru_maxrss keeps the parent's)
        peak = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    print(len(ids), peak / 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=["whole", "pieces"])
    args = parser.parse_args()
    if args.child:
        child(args.child, args.chars)
        return
    text = text_of(args.chars)
    tok = bpe(text)
    assert tokenize(tok, text, "bench") == encode_text(tok, text)
    times: dict[str, list[float]] = {"whole": [], "pieces": []}
    for _ in range(args.repeats):  # round-robin, so that noise hits both alike
        for way, fn in (
            ("whole", lambda: encode_text(tok, text)),
            ("pieces", lambda: tokenize(tok, text, "b")),
        ):
            t0 = time.perf_counter()
            fn()
            times[way].append(time.perf_counter() - t0)
    whole, pieces = statistics.median(times["whole"]), statistics.median(times["pieces"])
    peaks = {}
    for way in times:
        out = subprocess.run(
            [sys.executable, __file__, "--child", way, "--chars", str(args.chars)],
            capture_output=True,
            text=True,
            check=True,
        )
        peaks[way] = float(out.stdout.split()[1])
    print(f"{args.chars:,} characters, {len(encode_text(tok, text)):,} tokens")
    print(f"whole: {whole:.3f} s, peak RSS {peaks['whole']:.0f} MiB")
    print(f"pieces: {pieces:.3f} s, peak RSS {peaks['pieces']:.0f} MiB")
    print(
        f"pieces / whole: {pieces / whole:.2f}x the time, {peaks['pieces'] / peaks['whole']:.2f}x the peak RSS"
    )


if __name__ == "__main__":
    main()
