"""PackedCollator inside a real transformers Trainer step: the packed loss equals the loss of the same records
computed one at a time by the model itself (its own positions; mean over label tokens)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from support import tiny_vlm as tv

import mrope
from mrope import Image, Text, Video
from mrope.integrations import transformers as mt
from mrope.packing import PackedCollator

NAME = "qwen2-vl"


def _records() -> list[dict]:
    """Processor-like outputs: ids with the real placeholder runs, grids, random pixels, labels that
    ignore the vision tokens."""
    net = tv.model(NAME)
    rules = mt.model_rules(net)
    prompts = [
        [Text(tv.tokenize("describe")), Image(grid=(1, 4, 6)), Text(tv.tokenize("a cat"))],
        [Text(tv.tokenize("only words here"))],
        [Text(tv.tokenize("clip")), Video(grid=(2, 4, 4), fps=2.0), Text(tv.tokenize("runs"))],
        [Image(grid=(1, 4, 4)), Text(tv.tokenize("two")), Image(grid=(1, 6, 4)), Text(tv.tokenize("dogs!"))],
    ]
    out = []
    for seed, segments in enumerate(prompts):
        p = mrope.build_positions(segments, model=NAME, rules=rules, tokenizer=tv.tokenize)
        ids = torch.from_numpy(p.input_ids)[None]
        labels = ids.clone()
        labels[0, torch.from_numpy(p.mm_token_type_ids) != 0] = -100
        types = torch.from_numpy(p.mm_token_type_ids)[None]
        record = {
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "mm_token_type_ids": types,
            "labels": labels,
        }
        if len(p.image_grid_thw):
            record["image_grid_thw"] = torch.from_numpy(p.image_grid_thw)
            record["pixel_values"] = tv.pixels(net, record["image_grid_thw"], 10 + seed)
        if len(p.video_grid_thw):
            record["video_grid_thw"] = torch.from_numpy(p.video_grid_thw)
            record["pixel_values_videos"] = tv.pixels(net, record["video_grid_thw"], 20 + seed)
        out.append(record)
    return out


def _unpacked_loss(net: torch.nn.Module, records: list[dict]) -> float:
    """Sum of the token losses of each record alone (the model computes its own positions) over the
    number of label tokens: transformers' causal LM loss, shift written out."""
    total, count = 0.0, 0
    with torch.no_grad():
        for r in records:
            kw = {k: v for k, v in r.items() if k not in ("labels", "attention_mask")}
            net.model.rope_deltas = None
            logits = net(**kw, use_cache=False).logits[0]
            labels = r["labels"][0]
            total += float(F.cross_entropy(logits[:-1], labels[1:], ignore_index=-100, reduction="sum"))
            count += int((labels[1:] != -100).sum())
    net.model.rope_deltas = None
    return total / count


def test_trainer_step_loss_equals_the_unpacked_loss(tmp_path) -> None:
    from transformers import Trainer, TrainingArguments

    net = tv.model(NAME)
    records = _records()
    collator = PackedCollator(net, max_length=60)
    batch = collator(records)
    assert batch["position_ids"].shape[:2] == (4, 2) and "attention_mask" not in batch  # two rows
    text = batch["position_ids"][0]
    assert bool((batch["labels"][text == 0] == -100).all())  # each sample's first token: label -100
    assert int((text == 0).sum()) == len(records) + 1  # four samples and one padding segment
    reference = _unpacked_loss(net, records)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=len(records),
        max_steps=1,
        learning_rate=0.0,
        report_to=[],
        use_cpu=True,
        remove_unused_columns=False,
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    try:
        trainer = Trainer(model=net, args=args, train_dataset=records, data_collator=collator)
        loss = trainer.train().training_loss
    finally:
        net.eval()
        net.model.rope_deltas = None
    assert loss == pytest.approx(reference, rel=1e-5)
    # the control: the same rows without the text row let the samples attend to each other
    three = {**batch, "position_ids": batch["position_ids"][1:]}
    with torch.no_grad():
        leaked = float(net(**three).loss)
    assert abs(leaked - reference) > 1e-3


def test_placeholder_grid_mismatch_and_long_records_are_refused() -> None:
    records = _records()
    collator = PackedCollator(NAME, max_length=60, rules=mt.model_rules(tv.model(NAME)))
    wrong = dict(records[3], image_grid_thw=torch.tensor([[1, 4, 4], [1, 4, 4]]))  # the second image is 6 x 4
    with pytest.raises(mrope.PackingError, match="record 1: its placeholders and grids do not agree"):
        collator([records[1], wrong])
    with pytest.raises(mrope.PackingError, match=r"sample 0 has \d+ tokens, more than max_length=8"):
        PackedCollator(NAME, max_length=8)(records[:1])
    with pytest.raises(mrope.PackingError, match="qwen3.5: packed input needs fla"):
        PackedCollator("qwen3.5", max_length=8)
    out = collator(records)
    grids = np.concatenate([r["image_grid_thw"].numpy() for r in records if "image_grid_thw" in r])
    assert sorted(map(tuple, out["image_grid_thw"].tolist())) == sorted(map(tuple, grids.tolist()))
    assert out["pixel_values"].shape[0] == int(out["image_grid_thw"].prod(-1).sum())
