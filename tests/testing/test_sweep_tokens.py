"""The position sweep's length follows the tokenizer: ``mrope check PATH --quick`` on a checkpoint whose
tokenizer needs more than 48 tokens for the pass-key text sizes the sweep to hold it, and
``--sweep-tokens`` sets the length (too short: a failed row that says how many the text needs).

The tokenizer is character-level (one token a character, built here with the ``tokenizers`` library), so
the needed length is the text's character count, written out here independently of the code under test.
"""

from __future__ import annotations

import json

import pytest

from mrope._cli import main
from mrope.testing import tiny_model

pytestmark = pytest.mark.timeout(180)

FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
EVIDENCE = "The pass key is 71432. Remember it. 71432 is the pass key. "
QUESTION = "What is the pass key? The pass key is"
ANSWER = " 71432."
NEEDED = len(FILLER) + len(EVIDENCE) + len(QUESTION) + len(ANSWER)  # one token a character


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    d = tmp_path_factory.mktemp("charckpt")
    tiny_model("qwen2-vl").save_pretrained(d)
    chars = sorted(set(FILLER + EVIDENCE + QUESTION + ANSWER))
    vocab = {"[UNK]": 999, **{c: 1000 + i for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(d)
    ids = PreTrainedTokenizerFast.from_pretrained(d)(EVIDENCE, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(EVIDENCE)  # the premise: one token a character
    return d


def check(folder, *extra: str, capsys) -> tuple[int, dict]:  # noqa: ANN001
    code = main(["check", str(folder), "--quick", "--rows", "position_sweep", "--json", "-", *extra])
    doc = json.loads(capsys.readouterr().out)
    return code, next(r for r in doc["rows"] if r["name"] == "position_sweep")


def test_quick_sweep_is_sized_from_the_tokenizer(folder, monkeypatch, capsys) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert NEEDED > 48
    code, row = check(folder, capsys=capsys)
    assert (code, row["status"]) == (0, "pass"), row
    assert row["measured"]["context_tokens"] == NEEDED and row["measured"]["evidence"] == "pass-key text"
    code, row = check(folder, "--sweep-tokens", str(NEEDED + 40), capsys=capsys)
    assert (code, row["measured"]["context_tokens"]) == (0, NEEDED + 40)


def test_a_sweep_too_short_says_what_it_needs(folder, monkeypatch, capsys) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, row = check(folder, "--sweep-tokens", "48", capsys=capsys)  # the old quick length
    assert (code, row["status"]) == (1, "fail")
    assert f"needs {NEEDED} (sweep_tokens={NEEDED}, --sweep-tokens {NEEDED})" in row["reason"]
    assert main(["check", str(folder), "--sweep-tokens", "0"]) == 2
    assert "--sweep-tokens" in capsys.readouterr().err
