"""A run on someone's labelled text (`redkit fit`): the text pipeline unchanged (stage base,
experts each trained alone on its own domain, heads, router, gate, every composition), with the
classes and domains found in the data instead of Task 1's answers and ranges.

    <run>/data/{train,val[,test]}.jsonl   the data as read (text, label, domain), val carved if absent
    <run>/data/splits.json                 counts per split and domain, and what was done unasked
"""

import json
from functools import cached_property
from pathlib import Path

import torch

from redkit.atomic import write_json, write_jsonl
from redkit.errors import RedkitError
from redkit.fitting.config import FitConfig
from redkit.fitting.data import FitData, load_run_data
from redkit.fitting.records import Fields, LabelReader, Record, read_records
from redkit.jsonfile import jsonl_objects
from redkit.names import check_name
from redkit.run import RUN_KINDS, TextRun
from redkit.space import LabelSpace

FEDERATION = "federation.json"  # in a run assembled from owners' contributions: who sent which domains


@RUN_KINDS.register("fit")
class FitRun(TextRun):
    config_class = FitConfig
    reuse_prefix = True

    @property
    def assembled(self) -> bool:
        """Assembled from data owners' contributions (redkit/federated/assemble.py): no split, and no module
        that trains on pooled data (the global head); compositions that need one are not scored."""
        return (self.dir / FEDERATION).is_file()

    @property
    def fields(self) -> Fields:
        return Fields(self.config.text_field, self.config.label_field, self.config.domain_field)

    @cached_property
    def space(self) -> LabelSpace:
        return LabelSpace.of_labels(
            tuple(self.config.labels), tuple(self.config.domains), tuple(self.config.label_domains)
        )

    def load_data(self) -> FitData:
        """The run's data directory read and checked again (nothing written)."""
        oos = Path(self.config.oos_file) if self.config.oos_file else None
        return load_run_data(
            Path(self.config.data_dir),
            self.config.data_format,
            self.fields,
            self.config.seed,
            self.config.val_fraction,
            oos,
            skip_invalid=self.config.skip_invalid,
        )

    def prepare_data(self, data: FitData | None = None) -> dict:
        """Write the splits once (from `data`, already read, or from the data directory); reruns reuse them."""
        path = self.dir / "data" / "splits.json"
        if path.is_file():
            return json.loads(path.read_text())
        data = data or self.load_data()
        if (data.labels, data.domains) != (self.space.labels, self.space.domains):
            raise RedkitError(
                f"{self.config.data_dir}: its labels or domains changed since {self.dir} was made; use another --out"
            )
        return self.write_data(data)

    def write_data(self, data: FitData) -> dict:
        for name, records in data.splits.items():
            write_jsonl(self.dir / "data" / f"{name}.jsonl", (r.to_json() for r in records))
        for name, texts in data.oos.items():
            write_jsonl(self.dir / "data" / f"{name}.jsonl", ({"id": i, "text": t} for i, t in enumerate(texts)))
        summary = {
            "splits": {
                name: {
                    "count": len(records),
                    "per_domain": {d: sum(r.domain == d for r in records) for d in self.space.domains},
                }
                for name, records in data.splits.items()
            },
            "oos": {name: len(texts) for name, texts in data.oos.items()},
            "labels": list(self.space.labels),
            "domains": list(self.space.domains),
            "notes": data.notes,
        }
        write_json(self.dir / "data" / "splits.json", summary)
        return summary

    def _split_names(self, key: str) -> list[str]:
        """The splits data/splits.json lists under `key`, each a file data/<name>.jsonl: a plain name
        (an expert directory's splits.json comes from elsewhere; redkit/names.py)."""
        path = self.dir / "data" / "splits.json"
        listed = json.loads(path.read_text()).get(key, {})
        return [check_name(name, "split", f"{path}: field '{key}'", reserved=False) for name in listed]

    @cached_property
    def splits(self) -> dict[str, list[Record]]:
        names = self._split_names("splits")
        return {name: read_records(self.dir / "data" / f"{name}.jsonl", Fields(), LabelReader()) for name in names}

    @cached_property
    def oos_texts(self) -> dict[str, list[str]]:
        """Out-of-scope texts by split (oos_val, oos_test), where the run has any."""
        names = self._split_names("oos")
        return {name: [obj["text"] for _, obj in jsonl_objects(self.dir / "data" / f"{name}.jsonl")] for name in names}

    def subset_sizes(self, size: int, pools: list[list[int]]) -> list[int]:
        """Stratified by domain: each domain in proportion to its examples (at least one), since
        someone's domains rarely have equal sizes."""
        total = sum(len(pool) for pool in pools)
        return [min(len(pool), max(1, round(size * len(pool) / total))) for pool in pools]

    def domain_label(self, example: Record) -> int:
        """The domain's index; -1 for none of the run's (an evaluated file's record may have none)."""
        return self.space.domains.index(example.domain) if example.domain in self.space.domains else -1

    def classes(self, examples: list[Record]) -> torch.Tensor:
        """(N,) classes; -1 for a label never seen in training (scored as wrong)."""
        return torch.tensor([self.space.label_index.get(ex.answer, -1) for ex in examples])

    # ---- evaluation ------------------------------------------------------------------------------

    @property
    def evaluation_splits(self) -> tuple[str, ...]:
        return tuple(name for name in ("test", "val") if name in self.splits)

    def read_file(self, path: Path) -> list[Record]:
        """A file to evaluate on, with the run's field names; its records need a text and a label,
        a domain only for the oracle compositions."""
        return read_records(Path(path), self.fields, LabelReader(), need=("label",))

    def groups(self, examples: list[Record]) -> dict[str, list[str]]:
        return {"domain": [ex.domain if ex.domain in self.space.domains else "(other)" for ex in examples]}

    def metrics(self, pred, true) -> dict:
        from redkit.metrics import label_metrics

        return label_metrics(pred, true)

    def write_report(self, results: dict) -> str:
        from redkit.fitting.report import write_fit_report

        return write_fit_report(self.dir, results, self.space.domains)
