"""CLINC150 (Larson et al., EMNLP-IJCNLP 2019) read as its authors published it.

    DIR/data_full.json   {"train", "val", "test", "oos_train", "oos_val", "oos_test"}: lists of [text, intent]
    DIR/domains.json     {domain: [intent, ...]}: every in-scope intent in exactly one domain

150 in-scope intents in 10 domains (100 / 20 / 30 queries per intent in train / val / test) and
out-of-scope queries (intent "oos": 100 / 100 / 1,000). The in-scope splits become a fit run's
records (text, intent as label, its domain); the OOS splits stay texts, for the oos-threshold
protocol (redkit/oos). `oos_train` is read and checked but never trained on: the oos-threshold
protocol uses no OOS example in training. `--data` points at your copy of the two files (default data/clinc150).
"""

from dataclasses import dataclass
from pathlib import Path

from redkit.errors import RedkitError
from redkit.fitting.records import Record
from redkit.jsonfile import read_json
from redkit.names import check_name

# Where `redkit reproduce clinc150` (and the studies on it) look by default, from the working directory:
# put the authors' data_full.json and domains.json there (github.com/clinc/oos-eval, data/), or give --data.
DEFAULT_DIR = Path("data/clinc150")
IN_SCOPE_SPLITS = ("train", "val", "test")
OOS_SPLITS = ("oos_train", "oos_val", "oos_test")
OOS_INTENT = "oos"


@dataclass
class Clinc150:
    splits: dict[str, list[Record]]  # train / val / test: in-scope records (text, intent, domain)
    oos: dict[str, list[str]]  # oos_train / oos_val / oos_test: the texts
    domains: tuple[str, ...]  # sorted, as a fit run orders them
    intents: tuple[str, ...]  # sorted


def read_domains(path: Path) -> dict[str, str]:
    """{intent: domain} from domains.json; an intent in two domains is an error naming both."""
    raw = read_json(path, "CLINC150's domains.json")
    if not isinstance(raw, dict) or not raw:
        raise RedkitError(f"{path}: expected an object {{domain: [intent, ...]}}, got {type(raw).__name__}")
    domain_of: dict[str, str] = {}
    for domain, intents in raw.items():
        check_name(domain, "domain", str(path))  # a module folder each (redkit/names.py)
        if not isinstance(intents, list) or not all(isinstance(i, str) and i for i in intents):
            raise RedkitError(f"{path}: domain {domain!r} must list intent names (non-empty strings)")
        for intent in intents:
            if intent in domain_of:
                raise RedkitError(f"{path}: intent {intent!r} is in two domains, {domain_of[intent]!r} and {domain!r}")
            domain_of[intent] = domain
    return domain_of


def _pairs(path: Path, raw: dict, split: str) -> list[tuple[str, str]]:
    if split not in raw:
        raise RedkitError(f"{path}: no split {split!r} (expected {', '.join(IN_SCOPE_SPLITS + OOS_SPLITS)})")
    entries = raw[split]
    if not isinstance(entries, list) or not entries:
        raise RedkitError(f"{path}: split {split!r} must be a non-empty list of [text, intent] pairs")
    pairs = []
    for i, pair in enumerate(entries):
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not all(isinstance(x, str) for x in pair)
            or not pair[0].strip()
            or not pair[1].strip()
        ):
            raise RedkitError(
                f"{path}: {split}[{i}] is not a [text, intent] pair of non-empty strings: {str(pair)[:80]}"
            )
        pairs.append((pair[0].strip(), pair[1].strip()))
    return pairs


def read_clinc150(directory: str | Path) -> Clinc150:
    """Both files read and checked before anything is written: a missing split, a malformed pair,
    an intent without a domain or in two, an OOS query among in-scope ones (or the reverse) is one
    RedkitError naming the file and the entry."""
    directory = Path(directory)
    data_path, domains_path = directory / "data_full.json", directory / "domains.json"
    for path in (data_path, domains_path):
        if not path.is_file():
            raise RedkitError(
                f"{path}: missing (CLINC150 needs data_full.json and domains.json, as its authors published them)"
            )
    domain_of = read_domains(domains_path)
    raw = read_json(data_path, "CLINC150's data_full.json")
    if not isinstance(raw, dict):
        raise RedkitError(f"{data_path}: expected an object of splits, got {type(raw).__name__}")
    splits: dict[str, list[Record]] = {}
    for split in IN_SCOPE_SPLITS:
        records = []
        for i, (text, intent) in enumerate(_pairs(data_path, raw, split)):
            where = f"{data_path}: {split}[{i}]"
            if intent == OOS_INTENT:
                raise RedkitError(f"{where}: an out-of-scope query in an in-scope split")
            if intent not in domain_of:
                raise RedkitError(f"{where}: intent {intent!r} has no domain in {domains_path}")
            records.append(Record(i, text, intent, domain_of[intent], where))
        splits[split] = records
    oos = {}
    for split in OOS_SPLITS:
        pairs = _pairs(data_path, raw, split)
        for i, (_, intent) in enumerate(pairs):
            if intent != OOS_INTENT:
                raise RedkitError(
                    f"{data_path}: {split}[{i}]: intent {intent!r} in an out-of-scope split (expected {OOS_INTENT!r})"
                )
        oos[split] = [text for text, _ in pairs]
    trained = {r.answer for r in splits["train"]}  # the classes: what train has
    for split in ("val", "test"):
        for r in splits[split]:
            if r.answer not in trained:
                raise RedkitError(f"{r.where}: intent {r.answer!r} never occurs in train")
    return Clinc150(splits, oos, tuple(sorted({r.domain for r in splits["train"]})), tuple(sorted(trained)))
