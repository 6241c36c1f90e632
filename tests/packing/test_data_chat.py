"""Chat templates and loss labels: messages rendered with the checkpoint's own template give the token ids
transformers' ``apply_chat_template`` gives (tokenizer and processor), and ``labels`` hold exactly the
assistant turns' tokens.

The tokenizer is built here with the ``tokenizers`` library (a byte-level BPE trained on a few lines, with
Qwen's special tokens) and saved to a folder with a Qwen2-VL-style ``chat_template`` in its
``tokenizer_config.json``; the expected ids come from transformers 5.24's ``PreTrainedTokenizerFast`` and
``Qwen2VLProcessor`` (its image processor sizes the image and expands ``<|image_pad|>``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support import media
from support.chat_templates import QWEN2_VL_TEMPLATE
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from mrope._chat import ChatTemplateError, assistant_spans, find_chat_template, render_chat
from mrope.pipeline import Preprocessor, process_batch

SPECIAL = [
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
MODEL = "qwen2-vl"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("chat")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [
        "You are a helpful assistant.",
        "Describe this picture, please.",
        "A cat on a mat.",
        "system user",
    ]
    tok.train_from_iterator(
        corpus * 4,
        trainers.BpeTrainer(
            vocab_size=300, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": QWEN2_VL_TEMPLATE, "tokenizer_class": "PreTrainedTokenizerFast"})
    )
    media.write_image(d / "cat.png", 84, 56)
    return d


def rules_of(tok: Tokenizer) -> dict[str, int]:
    """The tiny tokenizer's special-token ids as qwen2-vl rule overrides."""
    ids = {t: tok.token_to_id(t) for t in SPECIAL}
    return {
        "vision_start_id": ids["<|vision_start|>"],
        "vision_end_id": ids["<|vision_end|>"],
        "image_pad_id": ids["<|image_pad|>"],
        "video_pad_id": ids["<|video_pad|>"],
    }


CHAT = [
    {"role": "user", "content": [{"type": "text", "text": "Describe this picture, please."}]},
    {"role": "assistant", "content": [{"type": "text", "text": "A cat on a mat."}]},
    {"role": "user", "content": "Thank you."},
    {"role": "assistant", "content": "You are welcome."},
]


def hf_tokenizer(folder: Path):
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    hf.chat_template = QWEN2_VL_TEMPLATE
    return hf


def test_text_chat_equals_apply_chat_template_and_labels_are_the_assistant_turns(folder) -> None:
    hf = hf_tokenizer(folder)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    pre = Preprocessor(model=MODEL, tokenizer=str(folder / "tokenizer.json"), input_ids=True, labels=True)
    assert find_chat_template(folder / "tokenizer.json") == QWEN2_VL_TEMPLATE  # found next to the tokenizer
    p, labels = pre.sample({"messages": CHAT})
    expected = hf.apply_chat_template(CHAT, tokenize=True, return_dict=True)["input_ids"]
    assert p.input_ids.tolist() == list(expected)  # ids, so also the count, with the system prompt it adds
    assert p.num_tokens == len(expected)
    # the labels: each assistant reply with its "<|im_end|>\n", tokenized by transformers on its own
    replies = [
        hf.encode(t + "<|im_end|>\n", add_special_tokens=False)
        for t in ("A cat on a mat.", "You are welcome.")
    ]
    kept = labels[labels != -100].tolist()
    assert kept == replies[0] + replies[1]
    # ... in their places: the first reply right after the first generation prompt
    prompt = hf.apply_chat_template(CHAT[:1], tokenize=True, add_generation_prompt=True, return_dict=True)
    start = len(prompt["input_ids"])
    assert (labels[:start] == -100).all() and labels[start : start + len(replies[0])].tolist() == replies[0]
    # negative control: the fixed turn wrapper (no system prompt) gives other ids, and the job turns it off
    plain = Preprocessor(model=MODEL, tokenizer=tok, chat_template=None, input_ids=True).positions(
        {"messages": CHAT}
    )
    assert plain.num_tokens != len(expected)
    # the row form: labels and assistant_mask columns, an empty error_code
    table = process_batch(
        {"messages": [CHAT]}, model=MODEL, tokenizer=str(folder / "tokenizer.json"), labels=True, keep=()
    )
    assert table.column("labels").to_pylist()[0] == labels.tolist()
    assert table.column("assistant_mask").to_pylist()[0] == (labels != -100).astype(int).tolist()
    assert table.column("error_code").to_pylist() == [""]


def test_image_chat_equals_the_processor_route(folder) -> None:
    """The image processor sizes the image; its ``<|image_pad|>`` becomes ``grid.prod() // merge**2`` pads,
    as ``Qwen2VLProcessor.__call__`` expands it (transformers 5.24 models/qwen2_vl/processing_qwen2_vl.py)."""
    from PIL import Image as PILImage
    from transformers import Qwen2VLImageProcessorPil

    hf = hf_tokenizer(folder)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    messages = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "A cat?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A cat on a mat."}]},
    ]
    ids = hf.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]
    with PILImage.open(folder / "cat.png") as im:
        grid = Qwen2VLImageProcessorPil()(images=[im.convert("RGB")])["image_grid_thw"].tolist()[0]
    pad = tok.token_to_id("<|image_pad|>")
    k = ids.index(pad)
    expected = ids[:k] + [pad] * (int(np.prod(grid)) // 4) + ids[k + 1 :]
    pre = Preprocessor(
        model=MODEL, rules=rules_of(tok), tokenizer=str(folder / "tokenizer.json"), base_dir=folder
    )
    record = {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "image", "image": "cat.png"}, {"type": "text", "text": "A cat?"}],
            },
            messages[1],
        ]
    }
    p, labels = pre.sample(record)
    assert p.image_grid_thw.tolist() == [grid]
    assert p.input_ids.tolist() == expected
    reply = hf.encode("A cat on a mat.<|im_end|>\n", add_special_tokens=False)
    assert labels[labels != -100].tolist() == reply  # image tokens and the user turn are never labels


def test_template_errors_are_clear(folder) -> None:
    tok = str(folder / "tokenizer.json")
    pre = Preprocessor(model=MODEL, tokenizer=tok)
    with pytest.raises(Exception, match="a 'tokens' count cannot be rendered by a chat template"):
        pre.positions({"messages": [{"role": "user", "content": [{"type": "text", "tokens": 3}]}]})
    # a template that writes no placeholder for an image the messages hold
    text_only = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n<|im_end|>\n{% endfor %}"
    with pytest.raises(Exception, match="wrote no image placeholder"):
        Preprocessor(model=MODEL, tokenizer=tok, chat_template=text_only).positions(
            {"messages": [{"role": "user", "content": [{"type": "image", "grid": [1, 4, 4]}]}]}
        )
    with pytest.raises(ChatTemplateError, match="refused the messages: no"):
        render_chat("{{ raise_exception('no') }}", [])
    spans = assistant_spans(QWEN2_VL_TEMPLATE, CHAT)
    text = render_chat(QWEN2_VL_TEMPLATE, CHAT)
    assert [text[a:b] for a, b in spans] == ["A cat on a mat.<|im_end|>\n", "You are welcome.<|im_end|>\n"]
