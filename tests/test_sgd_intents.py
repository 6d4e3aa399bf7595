"""scripts/sgd_intents.py: the Schema-Guided Dialogue dataset as a fit data directory, on dialogues
written in SGD's layout (the real dataset is read from a checkout, never shipped)."""

import json

from conftest import load_script


def _script():
    return load_script("sgd_intents")


def _turn(speaker: str, text: str, frames: list[tuple[str, str | None, list[str]]]) -> dict:
    return {
        "speaker": speaker,
        "utterance": text,
        "frames": [
            {"service": service, "state": {"active_intent": intent}, "actions": [{"act": a} for a in acts]}
            for service, intent, acts in frames
        ],
    }


def _dialogues(prefix: str, n: int) -> list[dict]:
    out = []
    for i in range(n):
        out.append(
            {
                "dialogue_id": f"{prefix}_{i}",
                "services": ["Restaurants_1", "Movies_1"],
                "turns": [
                    _turn(
                        "USER", f"find me a place to eat {i}", [("Restaurants_1", "FindRestaurants", ["INFORM_INTENT"])]
                    ),
                    _turn("SYSTEM", "where?", [("Restaurants_1", None, ["REQUEST"])]),
                    _turn("USER", "in san jose", [("Restaurants_1", "FindRestaurants", ["INFORM"])]),
                    _turn("USER", f"book it for two {i}", [("Restaurants_1", "ReserveRestaurant", ["INFORM_INTENT"])]),
                    _turn("USER", f"any movies tonight {i}", [("Movies_1", "FindMovies", ["INFORM_INTENT"])]),
                    _turn(
                        "USER",
                        "both at once",
                        [
                            ("Restaurants_1", "FindRestaurants", ["INFORM_INTENT"]),
                            ("Movies_1", "FindMovies", ["INFORM_INTENT"]),
                        ],
                    ),
                ],
            }
        )
    return out


def test_intent_turns_become_a_fit_directory(tmp_path):
    sgd = tmp_path / "sgd"
    for split, n in (("train", 30), ("dev", 4)):
        (sgd / split).mkdir(parents=True)
        (sgd / split / "dialogues_001.json").write_text(json.dumps(_dialogues(split, n)))
    summary = _script().convert(sgd, tmp_path / "out", per_label=5, val_per_label=2, seed=0)
    rows = {
        name: [json.loads(line) for line in (tmp_path / "out" / f"{name}.jsonl").read_text().splitlines()]
        for name in ("train", "val", "test")
    }
    # Only turns stating one intent; a turn stating two is left out; the domain is the service's
    assert {(r["domain"], r["label"]) for r in rows["train"]} == {
        ("Restaurants", "FindRestaurants"),
        ("Restaurants", "ReserveRestaurant"),
        ("Movies", "FindMovies"),
    }
    assert summary["counts"] == {"train": 15, "val": 6, "test": 12} and summary["domains"] == 2
    assert all(r["text"] not in {"in san jose", "both at once"} for split in rows.values() for r in split)
    # train and val come from different dialogues; test is SGD's dev split
    number = lambda r: r["text"].split()[-1]  # noqa: E731  (the dialogue's index, in its texts)
    assert not {number(r) for r in rows["train"]} & {number(r) for r in rows["val"]}
    assert {number(r) for r in rows["test"]} <= {"0", "1", "2", "3"}
    again = _script().convert(sgd, tmp_path / "again", per_label=5, val_per_label=2, seed=0)
    assert again["counts"] == summary["counts"]
    assert (tmp_path / "again" / "train.jsonl").read_text() == (tmp_path / "out" / "train.jsonl").read_text()
