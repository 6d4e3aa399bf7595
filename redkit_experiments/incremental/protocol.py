"""The stream: which classes arrive at each step, and which examples come with them.

    domains   one step per domain (CLINC150: 10 domains of 15 intents), in an order shuffled with seed N
              (`--order N`)
    classes   Wu et al. (ICLR 2022)'s protocol: the labels grouped at random into tasks of `classes_per_task`
              (CLINC150: 15 tasks of 10 intents), the grouping fixed (seed 0), their order shuffled with seed N

At step t only the train and val examples of step t's classes are available; after it, every method is
scored on the test examples of steps 0..t together, with no step or domain id. A step's classes are its
own: a label that two domains share (SGD's FindMovies) is one class per (domain, label) in the domains
protocol, scored as its label.
"""

import random
from dataclasses import dataclass
from pathlib import Path

import torch

from redkit.errors import RedkitError
from redkit.fitting.data import FitData, load_run_data
from redkit.fitting.records import Fields

PROTOCOLS = ("domains", "classes")


@dataclass(frozen=True)
class Step:
    name: str  # the domain (domains protocol) or "task07" (classes protocol)
    classes: tuple[int, ...]  # indices into Stream.classes


@dataclass
class Stream:
    """Every example of every split, with the class and step it belongs to, and the order of the steps."""

    texts: dict[str, list[str]]  # split -> texts (train, val, test; oos_val, oos_test where the data has them)
    class_of: dict[str, torch.Tensor]  # split -> (N,) class index (in-scope splits)
    classes: tuple[str, ...]  # class c's name: its label (classes protocol) or "domain/label" (domains protocol)
    labels: tuple[str, ...]  # class c's label (what an answer is scored as)
    steps: tuple[Step, ...]  # in arrival order

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


def read_data(data_dir: Path) -> FitData:
    """CLINC150 as its authors published it (data_full.json + domains.json), else a fit data directory."""
    data_dir = Path(data_dir)
    data_format = "clinc150" if (data_dir / "data_full.json").is_file() else "files"
    return load_run_data(data_dir, data_format, Fields(), seed=0, val_fraction=0.1)


def build_stream(data: FitData, protocol: str, order: int, classes_per_task: int = 10) -> Stream:
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
        shuffled = list(range(len(classes)))
        random.Random(0).shuffle(shuffled)  # the grouping is fixed; --order shuffles the tasks' order
        chunks = [tuple(sorted(shuffled[i : i + classes_per_task])) for i in range(0, len(shuffled), classes_per_task)]
        groups = {f"task{i:02d}": chunk for i, chunk in enumerate(chunks)}
    index = {name: i for i, name in enumerate(classes)}
    texts, class_of = {}, {}
    for split in ("train", "val", "test"):
        records = [r for r in data.splits[split] if key(r) in index]  # a test label train lacks: never scored
        texts[split] = [r.question for r in records]
        class_of[split] = torch.tensor([index[key(r)] for r in records])
    texts |= {split: list(found) for split, found in data.oos.items()}
    order_of = sorted(groups)
    random.Random(order).shuffle(order_of)
    steps = tuple(Step(name, groups[name]) for name in order_of)
    return Stream(texts, class_of, classes, labels, steps)
