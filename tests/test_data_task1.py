"""Task 1 data: balance, fields, structure-disjoint splits, held-out templates, determinism."""

import json
from collections import Counter

import pytest

from redkit.cli import main
from redkit.errors import RedkitError
from redkit_experiments.arithmetic.generate import HELDOUT, DataConfig, generate
from redkit_experiments.arithmetic.records import read_jsonl
from redkit_experiments.arithmetic.task1 import HELDOUT_TEMPLATES, TRAIN_TEMPLATES


@pytest.fixture(scope="module")
def structure_data():
    return generate(DataConfig(n=5000, seed=3))


def test_sizes_and_exact_balance(structure_data):
    assert [len(structure_data[s]) for s in ("train", "val", "test", HELDOUT)] == [4000, 500, 500, 500]
    for split, examples in structure_data.items():
        assert set(Counter(ex.label for ex in examples).values()) == {len(examples) // 5}, split


def test_answers_are_sums_of_operands_in_range(structure_data):
    for ex in structure_data["train"]:
        a, b = map(int, ex.structure.split("+"))
        assert 2 <= a <= 50 and 2 <= b <= 50 and ex.answer == a + b


def test_structure_split_is_disjoint(structure_data):
    train = {ex.structure for ex in structure_data["train"]}
    for split in ("val", "test", HELDOUT):
        assert train.isdisjoint({ex.structure for ex in structure_data[split]}), split
    assert not train & {ex.question for ex in structure_data["test"]}


def test_random_split_shares_structures():
    data = generate(DataConfig(n=5000, seed=3, split="random"))
    shared = {ex.structure for ex in data["train"]} & {ex.structure for ex in data["test"]}
    assert len(shared) > 100  # the paper's protocol: test pairs were seen in training


def test_heldout_templates_are_disjoint_and_used(structure_data):
    assert not set(TRAIN_TEMPLATES) & set(HELDOUT_TEMPLATES)
    assert {ex.template.split("/")[0] for ex in structure_data["train"]} == {"train"}
    heldout = structure_data[HELDOUT]
    assert {ex.template.split("/")[0] for ex in heldout} == {"heldout"}
    assert len({ex.template for ex in heldout}) == len(HELDOUT_TEMPLATES)
    # the same test expressions, phrased otherwise
    assert Counter(ex.structure for ex in heldout) == Counter(ex.structure for ex in structure_data["test"])


def test_same_seed_same_data_other_seed_other_data():
    a, b, c = (generate(DataConfig(n=500, seed=s)) for s in (1, 1, 2))
    assert a == b
    assert a["train"] != c["train"]


def test_cli_writes_files_with_fields_and_splits_json(tmp_path):
    assert main(["data", "task1", "--out", str(tmp_path), "--n", "1000", "--seed", "5"]) == 0
    first = json.loads((tmp_path / "train.jsonl").read_text().splitlines()[0])
    assert list(first)[:6] == ["id", "question", "answer", "label", "domain", "num_ops"]
    summary = json.loads((tmp_path / "splits.json").read_text())
    assert summary["splits"]["test"]["per_domain"] == {
        f"range_{lo}_{hi}": 20 for lo, hi in ((2, 20), (21, 40), (41, 60), (61, 80), (81, 100))
    }
    assert len(read_jsonl(tmp_path / "test_heldout_templates.jsonl")) == 100
    ids = [ex.id for s in ("train", "val", "test") for ex in read_jsonl(tmp_path / f"{s}.jsonl")]
    assert len(ids) == len(set(ids)) == 1000


def test_bad_config_is_a_clear_error():
    with pytest.raises(RedkitError, match="split"):
        DataConfig(split="sideways")
    with pytest.raises(RedkitError, match="too small"):
        DataConfig(n=10)
