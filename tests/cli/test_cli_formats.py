"""``mrope batch`` reads TRL's vision records and LLaVA records as the ``messages`` records they stand for:
the Parquet rows (positions, input_ids, grids) are equal, and ``{"messages": []}`` is an error row
(``invalid_request``), also under ``--pack`` (never ``sample_too_long``)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support import media
from tokenizers import Tokenizer, models, pre_tokenizers

from mrope._cli import main

pytestmark = pytest.mark.timeout(180)

REPLY = {"role": "assistant", "content": [{"type": "text", "text": "a cat ."}]}


def question(*first: dict) -> dict:
    return {"role": "user", "content": [*first, {"type": "text", "text": "\nwhat is this ?"}]}


RECORDS = [
    # TRL's collator input (trl/trainer/sft_trainer.py DataCollatorForVisionLanguageModeling: "images" and
    # "messages" with {"type": "image"} placeholders)
    {
        "id": "trl",
        "images": ["a.jpg", "b.png"],
        "messages": [question({"type": "image"}, {"type": "image"}), REPLY],
    },
    # LLaVA (llava/train/train.py: "image", "conversations" of from/value with <image>), ShareGPT's "images"
    {
        "id": "llava",
        "images": ["a.jpg", "b.png"],
        "conversations": [
            {"from": "human", "value": "<image><image>\nwhat is this ?"},
            {"from": "gpt", "value": "a cat ."},
        ],
    },
    {
        "id": "messages",
        "messages": [
            question({"type": "image", "image": "a.jpg"}, {"type": "image", "image": "b.png"}),
            REPLY,
        ],
    },
    {"id": "empty", "messages": []},
]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("cli_formats")
    media.write_image(d / "a.jpg", 320, 240)
    media.write_image(d / "b.png", 200, 400)
    vocab = {"[UNK]": 0, "what": 1, "is": 2, "this": 3, "?": 4, "a": 5, "cat": 6, ".": 7}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(d / "tokenizer.json"))
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return d


def batch(root: Path, out: Path, *extra: str) -> int:
    args = ["batch", root / "records.jsonl", "--out-dir", out, "--model", "qwen2-vl", "--tokenizer"]
    return main([str(a) for a in [*args, root / "tokenizer.json", "--format", "parquet", "--quiet", *extra]])


def test_trl_and_llava_records_round_trip_through_batch(root, tmp_path, capsys) -> None:
    assert batch(root, tmp_path) == 1  # the empty record fails, the others do not
    capsys.readouterr()
    rows = {r["id"]: r for r in pq.read_table(tmp_path / "samples.parquet").to_pylist()}
    want = rows["messages"]
    assert want["error"] == "" and len(want["image_grid_thw"]) == 2
    for name in ("trl", "llava"):
        got = rows[name]
        assert got["error"] == "", got["error"]
        for key in ("positions", "input_ids", "image_grid_thw", "num_tokens", "delta"):
            assert got[key] == want[key], (name, key)
    assert rows["empty"]["error_code"] == "invalid_request" and "no content" in rows["empty"]["error"]


def test_empty_messages_under_pack_is_invalid_request(root, tmp_path, capsys) -> None:
    assert batch(root, tmp_path, "--pack", "4096") == 1
    capsys.readouterr()
    manifest = [json.loads(line) for line in (tmp_path / "manifest.jsonl").read_text().splitlines()]
    codes = {m["id"]: m["error_code"] for m in manifest}
    assert codes == {"trl": "", "llava": "", "messages": "", "empty": "invalid_request"}


def test_positions_spec_reads_a_llava_request_as_its_messages(root, tmp_path, capsys) -> None:
    """``mrope positions --spec`` (the service's body) takes a LLaVA request as its messages request."""
    llava = {k: v for k, v in RECORDS[1].items() if k != "id"}
    messages = {k: v for k, v in RECORDS[2].items() if k != "id"}
    outputs = []
    for name, body in (("llava", llava), ("messages", messages)):
        spec = root / f"{name}.json"
        spec.write_text(json.dumps({"model": "qwen2-vl", **body}))
        assert main(["positions", "--spec", str(spec), "--tokenizer", str(root / "tokenizer.json")]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and "image 1x18x22" in outputs[0]
