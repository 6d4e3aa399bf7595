"""The stream: which classes arrive at each step, and which examples come with them.

    domains   one step per domain (CLINC150: 10 domains of 15 intents), in an order shuffled with seed N
              (`--order N`)
    classes   Wu et al. (ICLR 2022)'s protocol: the labels grouped at random into tasks of `classes_per_task`
              (CLINC150: 15 tasks of 10 intents), the grouping fixed (seed 0), their order shuffled with seed N.
              Where the data publishes its classes' order (BANKING77's categories.json), the grouping is Zheng
              et al. (ACL 2024)'s instead: consecutive runs of that order (7 tasks of 11 intents), unshuffled

At step t only the train and val examples of step t's classes are available; after it, every method is
scored on the test examples of steps 0..t together, with no step or domain id. A step's classes are its
own: a label that two domains share (SGD's FindMovies) is one class per (domain, label) in the domains
protocol, scored as its label.
"""

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

import torch

from redkit.errors import RedkitError
from redkit.fitting.data import FitData, load_run_data
from redkit.fitting.records import Fields
from redkit.jsonfile import read_json

PROTOCOLS = ("domains", "classes")


@dataclass(frozen=True)
class Step:
    name: str  # the domain (domains protocol) or "task07" (classes protocol)
    classes: tuple[int, ...]  # indices into Stream.classes


BANKING77_VAL_FRACTION = 0.1  # BANKING77 publishes no validation split: a tenth of train, carved with seed 0


@dataclass
class Stream:
    """Every example of every split, with the class and step it belongs to, and the order of the steps."""

    texts: dict[str, list[str]]  # split -> texts (train, val, test; oos_val, oos_test where the data has them)
    class_of: dict[str, torch.Tensor]  # split -> (N,) class index (in-scope splits)
    classes: tuple[str, ...]  # class c's name: its label (classes protocol) or "domain/label" (domains protocol)
    labels: tuple[str, ...]  # class c's label (what an answer is scored as)
    steps: tuple[Step, ...]  # in arrival order

    def fingerprint(self) -> str:
        """sha256 of every split's texts and classes and of the steps, in order: two studies with equal
        fingerprints saw the same stream, wherever their data directory was."""
        digest = hashlib.sha256()
        for split in sorted(self.texts):
            digest.update(json.dumps([split, self.texts[split]]).encode())
            if split in self.class_of:
                digest.update(json.dumps(self.class_of[split].tolist()).encode())
        digest.update(json.dumps([self.classes, self.labels, [list(s.classes) for s in self.steps]]).encode())
        return digest.hexdigest()

    def label_of_class(self) -> torch.Tensor:
        """(C,) each class's label, as an index into the sorted labels: two classes of one label (a label two
        domains share) answer the same."""
        names = sorted(set(self.labels))
        return torch.tensor([names.index(label) for label in self.labels])

    def step_of_class(self) -> torch.Tensor:
        """(C,) the step at which each class arrives."""
        out = torch.full((len(self.classes),), -1, dtype=torch.long)
        for t, step in enumerate(self.steps):
            out[list(step.classes)] = t
        return out

    def rows(self, split: str, steps: range | list[int]) -> torch.Tensor:
        """Indices of `split`'s examples whose class arrived at one of `steps`."""
        wanted = torch.zeros(len(self.classes), dtype=torch.bool)
        for t in steps:
            wanted[list(self.steps[t].classes)] = True
        return wanted[self.class_of[split]].nonzero(as_tuple=True)[0]


def read_data(data_dir: Path) -> tuple[FitData, tuple[str, ...] | None]:
    """(data, the published order of its classes or None): CLINC150 as its authors published it (data_full.json +
    domains.json), BANKING77 as PolyAI published it (train.csv and test.csv of text,category, categories.json: a
    val carved from train with a fixed seed), else a fit data directory."""
    data_dir = Path(data_dir)
    if (data_dir / "data_full.json").is_file():
        return load_run_data(data_dir, "clinc150", Fields(), seed=0, val_fraction=0.1), None
    if (data_dir / "categories.json").is_file():
        order = tuple(read_json(data_dir / "categories.json", "BANKING77's categories"))
        data = load_run_data(
            data_dir, "files", Fields(label="category", domain="category"), seed=0, val_fraction=BANKING77_VAL_FRACTION
        )  # one domain per intent: the val is carved per intent
        if sorted(order) != sorted(data.labels):
            raise RedkitError(f"{data_dir / 'categories.json'}: its categories are not train.csv's")
        return data, order
    return load_run_data(data_dir, "files", Fields(), seed=0, val_fraction=0.1), None


def build_stream(
    data: FitData, protocol: str, order: int, classes_per_task: int = 10, class_order: tuple[str, ...] | None = None
) -> Stream:
    if protocol not in PROTOCOLS:
        raise RedkitError(f"--protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    if "test" not in data.splits:
        raise RedkitError("the data has no test split: the study scores every step on the test queries")
    if protocol == "domains":
        names = sorted({(r.domain, r.answer) for r in data.splits["train"]})
        key = lambda r: f"{r.domain}/{r.answer}"  # noqa: E731
        classes = tuple(f"{d}/{label}" for d, label in names)
        labels = tuple(label for _, label in names)
        groups = {d: tuple(i for i, (dd, _) in enumerate(names) if dd == d) for d in sorted({d for d, _ in names})}
    else:
        classes = labels = tuple(sorted({r.answer for r in data.splits["train"]}))
        key = lambda r: r.answer  # noqa: E731
        if len(classes) < 2 * classes_per_task:
            raise RedkitError(f"--classes-per-task {classes_per_task}: {len(classes)} labels make fewer than 2 tasks")
        if class_order is None:
            grouped = list(range(len(classes)))
            random.Random(0).shuffle(grouped)  # the grouping is fixed; --order shuffles the tasks' order
        else:  # the published order, cut in runs (Zheng et al.)
            grouped = [classes.index(name) for name in class_order]
        chunks = [tuple(sorted(grouped[i : i + classes_per_task])) for i in range(0, len(grouped), classes_per_task)]
        groups = {f"task{i:02d}": chunk for i, chunk in enumerate(chunks)}
    index = {name: i for i, name in enumerate(classes)}
    texts, class_of = {}, {}
    for split in ("train", "val", "test"):
        records = [r for r in data.splits[split] if key(r) in index]  # a test label train lacks: never scored
        texts[split] = [r.question for r in records]
        class_of[split] = torch.tensor([index[key(r)] for r in records])
    texts |= {split: list(found) for split, found in data.oos.items()}
    order_of = sorted(groups)
    if class_order is None or protocol == "domains":
        random.Random(order).shuffle(order_of)
    elif order:
        raise RedkitError(f"--order {order}: this data's tasks come in their published order (0) only")
    steps = tuple(Step(name, groups[name]) for name in order_of)
    return Stream(texts, class_of, classes, labels, steps)
