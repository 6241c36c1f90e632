"""Assistant spans of a chat template: one streamed rendering (``mrope._chat.assistant_spans``) against
their definition (the conversation rendered up to each assistant turn, with and without it), in the same
process, on Qwen2-VL's template and conversations of alternating user and assistant turns.

    python benchmarks/bench_chat_spans.py [--sizes 100 300 1000] [--repeats 3]

Prints, per conversation length, the median seconds of each and their ratio; the spans are checked equal.
"""

from __future__ import annotations

import argparse
import statistics
import time

from mrope._chat import assistant_spans, render_chat

QWEN2_VL = (
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system\n"
    "You are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% endif %}"
)


def by_definition(template: str, messages: list[dict]) -> list[tuple[int, int]]:
    """The reference: two renders of the conversation up to each assistant turn (quadratic)."""
    full = render_chat(template, messages)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            before = render_chat(template, messages[:i], add_generation_prompt=True)
            through = render_chat(template, messages[: i + 1])
            assert through.startswith(before) and full.startswith(through)
            spans.append((len(before), len(through)))
    return spans


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 1000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| messages | definition (s) | one rendering (s) | ratio |")
    print("|---:|---:|---:|---:|")
    for n in args.sizes:
        messages = [{"role": ("user", "assistant")[k % 2], "content": f"turn number {k}"} for k in range(n)]
        assert assistant_spans(QWEN2_VL, messages) == by_definition(QWEN2_VL, messages)
        slow = median_seconds(lambda m=messages: by_definition(QWEN2_VL, m), args.repeats)
        fast = median_seconds(lambda m=messages: assistant_spans(QWEN2_VL, m), args.repeats)
        print(f"| {n:,} | {slow:.4f} | {fast:.4f} | {slow / fast:.1f}x |")


if __name__ == "__main__":
    main()
