"""Drive thousands of generated and mutated inputs through redkit's in-process CLI entry point.

    python scripts/fuzz_cli.py --work /tmp/fuzz [--inputs 10000] [--seed 0]

Builds (or reuses, in --work) one tiny trained Task 1 run and its bundle, hashes every file of the
run, then feeds `redkit.cli.main(argv)` inputs of these families, round-robin:

    malformed_json  valid records cut, byte-flipped or with characters spliced in (eval --data)
    wrong_types     fields of the wrong JSON type (eval --data)
    huge_numbers    5,000-digit, 1e308, NaN/Infinity literals, -0 as answers and ids (eval --data)
    empty_strings   empty files, blank lines, empty or blank questions and fields (eval --data)
    binary          random bytes as lines (eval --data)
    unicode         questions in any script, with combining marks and odd spaces (eval --data, predict)
    deep_nesting    arrays and objects 10 to 100,000 deep, as lines and as field values (eval --data)
    run_config      a copy of the run whose config.json is mutated with all of the above
    module_files    a copy of the run with one module file truncated, byte-flipped, given NaN/inf
                    weights, or its config.json mutated
    bundle_files    a copy of the bundle with one file truncated or altered, or its manifest mutated
    yaml_config     `--config FILE.yaml` for eval and export: odd values, unknown keys, malformed YAML
    argv            real command lines (eval, predict, export, report) mutated token by token

For each input: any exception other than argparse's SystemExit is a failure (its traceback kept);
exit code 2 must come with exactly one stderr line (argparse's own rejections print usage and
one error line: counted apart); exit codes other than 0 and 2 fail. At the end, every file of the
original run and bundle must have its original sha256. Prints a table of counts per family and
exits 1 on any failure.

Speed: evaluating a file encodes its texts with the backbone, so data files hold a few lines; the
process stays warm, and the pretrained backbone is read from disk once and copied per run opened
(as a server keeps its weights), which the script patches into redkit.run.text (nothing else is).
"""

import os

os.environ.setdefault("TQDM_DISABLE", "1")  # progress bars write to stderr: the one-line check would see them
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import hashlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections import Counter, defaultdict  # noqa: E402
from dataclasses import asdict  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from fuzz_inputs import (  # noqa: E402  (scripts/fuzz_inputs.py: what the inputs look like)
    DATA_FAMILIES,
    GOOD,
    ODD_VALUES,
    as_lines,
    binary,
    damage_safetensors,
    deep_nesting,
    mutate_json_document,
    nan_weights,
    nested,
)

import redkit.run.text  # noqa: E402
from redkit.bundle.export import export_bundle  # noqa: E402
from redkit.cli import main as cli_main  # noqa: E402
from redkit.errors import RedkitError  # noqa: E402

# ---- the harness --------------------------------------------------------------------------------


def warm_backbones() -> None:
    """Read each pretrained backbone from disk once per process and hand it to every run opened,
    its top layers reset to the pretrained ones first (Run.backbone then loads the run's tuned top
    onto them, as onto a fresh Backbone): a copy would cost a second per run opened."""
    built: dict[str, tuple] = {}
    original = redkit.run.text.Backbone

    def backbone(config):
        key = json.dumps(asdict(config), sort_keys=True, default=str)
        if key not in built:
            try:
                made = original(config)
                built[key] = (made, {k: v.clone() for k, v in made.top_state_dict().items()})
            except RedkitError as err:
                built[key] = (err, None)
        made, pretrained_top = built[key]
        if isinstance(made, RedkitError):
            raise made
        made.load_top_state_dict(pretrained_top)
        return made

    redkit.run.text.Backbone = backbone


def tree_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


class Outcome:
    ACCEPTED, REJECTED, USAGE, FAILED = "accepted", "rejected (1 line, exit 2)", "argparse usage (exit 2)", "failures"


def call(argv: list[str]) -> tuple[str, str]:
    """(outcome, detail) of `redkit ARGV` in this process."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli_main(argv)
            except SystemExit as exit_:  # argparse: --help (0) or a bad flag (2)
                code = exit_.code if isinstance(exit_.code, int) else 1
                if code == 2:
                    return Outcome.USAGE, ""
    except Exception:  # noqa: BLE001 - anything but RedkitError/SystemExit escaping main is the bug we look for
        return Outcome.FAILED, f"argv {argv!r}\n{traceback.format_exc()}"
    lines = err.getvalue().strip().splitlines()
    if code == 0:
        return Outcome.ACCEPTED, ""
    if code == 2 and len(lines) == 1 and lines[0].startswith("redkit: error: "):
        return Outcome.REJECTED, ""
    return Outcome.FAILED, f"argv {argv!r}: exit code {code}, stderr {err.getvalue()!r:.2000}"


def build(work: Path) -> tuple[Path, Path]:
    run, bundle = work / "run", work / "bundle"
    if not (run / "results.json").is_file():
        print(f"building the tiny run in {run} (a few minutes)", flush=True)
        assert cli_main(["reproduce", "task1", "--n", "400", "--max-epochs", "1", "--out", str(run)]) == 0
    if not bundle.is_dir():
        export_bundle(run, bundle, heads=True)
    return run, bundle


class Scratch:
    """Copies of the run and the bundle that one input at a time damages; each input's damage is
    undone before the next (restore), so one copy serves thousands of inputs."""

    def __init__(self, work: Path, run: Path, bundle: Path):
        self.root = work / "scratch"
        shutil.rmtree(self.root, ignore_errors=True)
        self.run = Path(
            shutil.copytree(
                run, self.root / "run", ignore=shutil.ignore_patterns("cache", "studies", "analysis", "peers")
            )
        )
        self.bundle = Path(shutil.copytree(bundle, self.root / "bundle"))
        self.saved: dict[Path, bytes] = {}

    def put(self, path: Path, data: bytes) -> None:
        self.saved.setdefault(path, path.read_bytes())
        path.write_bytes(data)

    def restore(self) -> None:
        for path, data in self.saved.items():
            path.write_bytes(data)
        self.saved.clear()
        for extra in (self.root / "out").glob("*"):
            shutil.rmtree(extra, ignore_errors=True) if extra.is_dir() else extra.unlink()


def inputs(rng: random.Random, family: str, scratch: Scratch, run: Path, bundle: Path):
    """Set up one input of `family` in the scratch copies and return its argv."""
    data = scratch.root / "data.jsonl"
    if family in DATA_FAMILIES:
        data.write_bytes(DATA_FAMILIES[family](rng))
        target = rng.choice([run, run, bundle])  # the originals: their hashes are checked at the end
        if family == "unicode" and rng.random() < 0.5:
            question = json.loads(data.read_bytes().splitlines()[0])["question"]
            return [
                "predict",
                "--run",
                str(target),
                question,
                "--composition",
                rng.choice(["red", "moe", "red_logit_experts"]),
            ]
        return [
            "eval",
            "--run",
            str(target),
            "--data",
            str(data),
            "--composition",
            rng.choice(["red", "moe", "global_head"]),
        ]
    data.write_bytes(as_lines(GOOD[:2]))
    if family == "run_config":
        config = scratch.run / "config.json"
        scratch.put(config, mutate_json_document(rng, config.read_bytes()))
        return ["eval", "--run", str(scratch.run), "--data", str(data), "--composition", "red"]
    if family in ("module_files", "bundle_files"):
        root = scratch.run if family == "module_files" else scratch.bundle
        files = sorted(p for p in root.joinpath("modules").rglob("*") if p.is_file())
        if family == "bundle_files":
            files += [root / "manifest.json", root / "config.json"]
        path = rng.choice(files)
        if path.suffix == ".safetensors":
            damaged = damage_safetensors(rng, path.read_bytes())
            scratch.put(path, nan_weights(rng, path) if damaged == b"NAN" else damaged)
        else:
            scratch.put(path, mutate_json_document(rng, path.read_bytes()))
        composition = "moe" if "heads" in path.parts or "gate" in path.parts else "red"
        if rng.random() < 0.5:
            return ["predict", "--run", str(root), "What is 12 plus 27?", "--composition", composition]
        return ["eval", "--run", str(root), "--data", str(data), "--composition", composition]
    if family == "yaml_config":
        return yaml_config(rng, scratch, data)
    return mutated_argv(rng, scratch, data)


def yaml_config(rng: random.Random, scratch: Scratch, data: Path) -> list[str]:
    """eval or export with a --config file of odd values, unknown keys or broken YAML."""
    path = scratch.root / "config.yaml"
    out = scratch.root / "out" / f"c{rng.randrange(10**6)}"
    keys = {
        "run": [str(scratch.bundle), str(scratch.run), "/nonexistent", ""],
        "data": [str(data), "/nonexistent", ""],
        "composition": ["red", ["red", "moe"], "nope", []],
        "heads": [True, False, "yes", 3],
        "out": [str(out)],
    }
    doc = {key: rng.choice(values) for key, values in keys.items() if rng.random() < 0.6}
    for _ in range(rng.randint(0, 2)):
        doc[rng.choice([*keys, "run_", "--data", "seed", "", "ünï"])] = rng.choice(ODD_VALUES + [nested(rng, 30)])
    text = json.dumps(doc).encode()  # JSON is YAML
    if rng.random() < 0.3:
        text = rng.choice(
            [
                b"{",
                b"run: [",
                b"- a\n- b",
                b"&a [*a, *a]",
                b"data: !!python/object/apply:os.system [ls]",
                b"%YAML 9.9\n---\nrun: x",
                b"run: x\nrun: y",
                b"\t: :",
                binary(rng),
                deep_nesting(rng),
            ]
        )
    path.write_bytes(text)
    command = rng.choice(["eval", "export"])
    argv = [command, "--config", str(path)]
    if command == "export" and "out" not in doc:
        argv += ["--out", str(out)]
    return argv


def mutated_argv(rng: random.Random, scratch: Scratch, data: Path) -> list[str]:
    """A valid command line of a read-only or scratch-writing command, then token edits."""
    out = scratch.root / "out" / f"b{rng.randrange(10**6)}"
    base = rng.choice(
        [
            ["eval", "--run", str(scratch.run), "--data", str(data), "--composition", "red"],
            ["predict", "--run", str(scratch.bundle), "What is 3 plus 4?"],
            ["export", "--run", str(scratch.run), "--out", str(out)] + (["--heads"] if rng.random() < 0.5 else []),
            ["report", "--run", str(scratch.bundle)],
        ]
    )
    junk = [
        "--run",
        "--data",
        "--out",
        "--composition",
        "--heads",
        "--help",
        "-h",
        "",
        "-",
        "--",
        "=",
        "red",
        "moe",
        "nope",
        str(scratch.bundle),
        str(scratch.run),
        str(data),
        "/nonexistent",
        "--composition=red",
        "\u202e",
        "ü" * 50,
        "-1",
    ]
    argv = list(base)
    for _ in range(rng.randint(0, 3)):
        how = rng.randrange(4)
        if how == 0 and argv:
            del argv[rng.randrange(len(argv))]
        elif how == 1:
            argv.insert(rng.randrange(len(argv) + 1), rng.choice(junk))
        elif how == 2 and len(argv) > 1:
            i, j = rng.randrange(len(argv)), rng.randrange(len(argv))
            argv[i], argv[j] = argv[j], argv[i]
        elif argv:
            argv[rng.randrange(len(argv))] = rng.choice(junk)
    if argv and argv[0] not in ("eval", "predict", "export", "report", "-h", "--help"):
        argv[0] = rng.choice(["eval", "predict", "report"])  # never a command that trains or writes data
    # Writes only where scratch allows: a mutated export must not write into the originals or elsewhere.
    if argv and argv[0] == "export" and "--out" in argv:
        i = argv.index("--out")
        if i + 1 < len(argv):
            argv[i + 1] = str(out)
    return argv


FAMILIES = [*DATA_FAMILIES, "run_config", "module_files", "bundle_files", "yaml_config", "argv"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--work", type=Path, required=True, help="holds the tiny run and bundle (reused) and scratch copies"
    )
    parser.add_argument("--inputs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--show", type=int, default=3, help="failures printed with their traceback")
    args = parser.parse_args()
    torch.set_num_threads(1)  # many tiny encodes: threads cost more than they give
    args.work.mkdir(parents=True, exist_ok=True)
    run, bundle = build(args.work)
    before = {"run": tree_hashes(run), "bundle": tree_hashes(bundle)}
    warm_backbones()
    scratch = Scratch(args.work, run, bundle)
    rng = random.Random(args.seed)
    counts: dict[str, Counter] = defaultdict(Counter)
    seconds: Counter = Counter()
    failures: list[str] = []
    start = time.perf_counter()
    for i in range(args.inputs):
        family = FAMILIES[i % len(FAMILIES)]
        tick = time.perf_counter()
        argv = inputs(rng, family, scratch, run, bundle)
        outcome, detail = call(argv)
        scratch.restore()
        seconds[family] += time.perf_counter() - tick
        counts[family][outcome] += 1
        if outcome == Outcome.FAILED:
            failures.append(f"[{family}] {detail}")
            print(f"failure [{family}]: {detail.strip().splitlines()[-1][:300]}", file=sys.stderr, flush=True)
            with (args.work / "failures.log").open("a", encoding="utf-8") as log:  # every traceback, as found
                log.write(f"[{family}] {detail}\n\n")
        if (i + 1) % 500 == 0:
            print(
                f"{i + 1} inputs, {len(failures)} failures, {time.perf_counter() - start:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    wall = time.perf_counter() - start
    after = {"run": tree_hashes(run), "bundle": tree_hashes(bundle)}
    # A file of the originals altered or removed is a failure; so is a new one, except the features an
    # `eval --data` of the run caches under cache/ (by design; a bundle's go to a temporary directory).
    changed = [f"{name}/{f}" for name in before for f in before[name] if before[name][f] != after[name].get(f)]
    added = [f"{name}/{f}" for name in before for f in set(after[name]) - set(before[name])]
    changed += [f for f in added if not f.startswith("run/cache/")]

    columns = [Outcome.ACCEPTED, Outcome.REJECTED, Outcome.USAGE, Outcome.FAILED]
    print(f"{'family':15s} {'inputs':>7s} " + " ".join(f"{c:>26s}" for c in columns) + f" {'seconds':>8s}")
    for family in FAMILIES:
        c = counts[family]
        print(
            f"{family:15s} {sum(c.values()):7d} "
            + " ".join(f"{c[col]:26d}" for col in columns)
            + f" {seconds[family]:8.1f}"
        )
    total = sum((counts[f] for f in FAMILIES), Counter())
    print(f"{'all':15s} {sum(total.values()):7d} " + " ".join(f"{total[col]:26d}" for col in columns) + f" {wall:8.1f}")
    print(
        f"{args.inputs} inputs in {wall:.0f} s ({1000 * wall / max(args.inputs, 1):.1f} ms each); "
        f"files of the original run and bundle changed: {len(changed)}; "
        f"feature files the run's eval cached under cache/: {len(added) - len(changed)}"
    )
    for failure in failures[: args.show]:
        print("\n" + failure)
    for name in changed[:10]:
        print(f"changed: {name}")
    return 1 if failures or changed else 0


if __name__ == "__main__":
    sys.exit(main())
