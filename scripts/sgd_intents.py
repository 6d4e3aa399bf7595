"""The Schema-Guided Dialogue dataset (Rastogi et al., AAAI 2020) as a `redkit fit` data directory:
intent detection with the service's domain as the domain.

    python scripts/sgd_intents.py SGD_DIR OUT_DIR [--per-label 60] [--val-per-label 20] [--seed 0]
    redkit fit --data OUT_DIR --out runs/sgd

SGD_DIR is a checkout of github.com/google-research-datasets/dstc8-schema-guided-dialogue (its
train/ and dev/ folders of dialogues_*.json). An example is a user turn that states an intent (an
INFORM_INTENT act in exactly one frame): its text, the intent as the label, and the domain of the
service (Restaurants_1 -> Restaurants). The shape differs from CLINC150's: 16 domains of 1 to 4
intents each, one intent (FindMovies) in two domains (Media, Movies), and few examples per label.

    train   from SGD's train dialogues: at most --per-label turns per (domain, intent), seeded
    val     from *other* SGD train dialogues (a dialogue's turns stay in one split): --val-per-label
    test    SGD's dev dialogues, every turn whose domain and intent train has (SGD's test services
            differ from train's, so its dev split is the held-out set)

The data is CC BY-SA 4.0 (the dataset's LICENSE.txt); it is read from SGD_DIR, never copied here.
"""

import argparse
import json
import random
from collections import defaultdict
from pathlib import Path


def intent_turns(files: list[Path]) -> list[dict]:
    """{text, label, domain, dialogue} of every user turn that states one intent, in file order."""
    turns = []
    for file in files:
        for dialogue in json.loads(file.read_text(encoding="utf-8")):
            for turn in dialogue["turns"]:
                if turn["speaker"] != "USER":
                    continue
                stated = [
                    frame for frame in turn["frames"] if any(a["act"] == "INFORM_INTENT" for a in frame["actions"])
                ]
                if len(stated) == 1 and turn["utterance"].strip():
                    frame = stated[0]
                    turns.append(
                        {
                            "text": " ".join(turn["utterance"].split()),
                            "label": frame["state"]["active_intent"],
                            "domain": frame["service"].split("_")[0],
                            "dialogue": dialogue["dialogue_id"],
                        }
                    )
    return turns


def sample(turns: list[dict], per_label: int, rng: random.Random) -> list[dict]:
    """At most `per_label` turns of each (domain, label), drawn with `rng`, in their original order."""
    groups = defaultdict(list)
    for i, t in enumerate(turns):
        groups[(t["domain"], t["label"])].append(i)
    keep = set()
    for key in sorted(groups):
        pool = groups[key]
        keep.update(rng.sample(pool, min(per_label, len(pool))))
    return [turns[i] for i in sorted(keep)]


def convert(sgd_dir: Path, out: Path, per_label: int = 60, val_per_label: int = 20, seed: int = 0) -> dict:
    files = {split: sorted((sgd_dir / split).glob("dialogues_*.json")) for split in ("train", "dev")}
    for split, found in files.items():
        if not found:
            raise SystemExit(f"{sgd_dir / split}: no dialogues_*.json (is {sgd_dir} a checkout of the SGD repository?)")
    rng = random.Random(seed)
    pool = intent_turns(files["train"])
    dialogues = sorted({t["dialogue"] for t in pool})
    held = set(rng.sample(dialogues, len(dialogues) // 5))  # a fifth of the dialogues: val's pool
    train = sample([t for t in pool if t["dialogue"] not in held], per_label, rng)
    val = sample([t for t in pool if t["dialogue"] in held], val_per_label, rng)
    known = {(t["domain"], t["label"]) for t in train}
    test = [t for t in intent_turns(files["dev"]) if (t["domain"], t["label"]) in known]
    val = [t for t in val if (t["domain"], t["label"]) in known]
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, rows in (("train", train), ("val", val), ("test", test)):
        (out / f"{name}.jsonl").write_text(
            "".join(json.dumps({k: r[k] for k in ("text", "label", "domain")}) + "\n" for r in rows), encoding="utf-8"
        )
        counts[name] = len(rows)
    summary = {
        "source": str(sgd_dir),
        "files": {k: len(v) for k, v in files.items()},
        "counts": counts,
        "domains": len({t["domain"] for t in train}),
        "labels": len({t["label"] for t in train}),
        "per_label": per_label,
        "val_per_label": val_per_label,
        "seed": seed,
    }
    (out / "SOURCE.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sgd_dir", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--per-label", type=int, default=60, help="training turns per (domain, intent), at most")
    p.add_argument("--val-per-label", type=int, default=20, help="validation turns per (domain, intent), at most")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    print(json.dumps(convert(a.sgd_dir, a.out, a.per_label, a.val_per_label, a.seed), indent=2))
