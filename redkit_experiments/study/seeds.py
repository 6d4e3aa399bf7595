"""`redkit study seeds`: full replicates of a benchmark that differ only in the training seed, and
the statistics that say which of the paper's orderings our data supports.

    <out>/seed-<s>/      one complete run per seed (every stage, stage base included, retrained);
                         the data is made once (data seed 0) and hard-linked into each (text: data/;
                         digits: splits.json), and a text run's cache of frozen-prefix states is
                         shared (its keys name the texts it holds)
    <out>/studies/seeds/ results.json, report.md, figures/

Per composition: mean, standard deviation and 95% Student-t interval of accuracy and macro-F1 over
the seeds. Per ordered pair (A, B) the paper claims (A better than B): McNemar's exact test on the
per-example correctness of each seed (two-sided binomial test on the discordant pairs), and a paired
t-test of the accuracies over seeds. A claim *holds* when A's mean is higher and the paired t-test
gives p < 0.05; *is reversed* when B's is higher with p < 0.05; otherwise we *cannot tell*.
"""

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from scipy import stats
from sklearn.metrics import f1_score

from redkit.compositions import ModuleSet, compose
from redkit.errors import RedkitError
from redkit_experiments.arithmetic.generate import DataConfig
from redkit_experiments.arithmetic.run import RunConfig, TaskRun, reproduce
from redkit_experiments.arithmetic.tasks import TASKS
from redkit_experiments.digits import reproduce_digits
from redkit_experiments.digits.config import DigitsConfig
from redkit_experiments.digits.run import DigitsRun
from redkit_experiments.study.links import link_data, link_or_copy
from redkit_experiments.study.stats import paired_t_p, t_interval, verdict  # noqa: F401  (verdict: re-exported)

CLAIMS = (("red", "moe"), ("red", "global_head"), ("red", "uniform"), ("moe", "uniform"))
COMPOSITIONS = (
    "base_classifier",
    "global_head",
    "oracle",
    "uniform",
    "moe",
    "red",
    "red_oracle",
    "red_uniform",
    "red_logit_experts",
)
# CLINC150 (a fit run at fit's defaults): RED against the honest references (docs/guides/design.md, decision 12).
CLINC_CLAIMS = (
    ("red", "joint"),
    ("red_per_domain", "joint"),
    ("red_per_domain", "global_head"),
    ("red", "global_head"),
    ("red_per_domain", "red"),
    ("joint", "linear_probe"),
)
CLINC_COMPOSITIONS = (
    "global_head",
    "oracle",
    "moe",
    "red",
    "red_oracle",
    "red_per_domain",
    "red_per_domain_oracle",
    "joint",
    "linear_probe",
)
TASKS_REPLICATED = ("task1", "task2", "digits", "clinc150", "fit")


@dataclass
class SeedsConfig:
    task: str = "task1"  # task1 | task2 | digits | clinc150 | fit (your data directory, `data_dir`; both at `redkit fit`'s defaults)
    seeds: int = 5  # seeds 0 .. seeds-1
    n: int | None = None  # examples of a text task (default: the task's)
    data_seed: int = 0
    split: str = "test"
    max_epochs: int | None = None  # cap every stage (quick runs and tests)
    data_dir: str | None = (
        None  # clinc150: the directory of data_full.json and domains.json (default data/clinc150); fit: DIR
    )

    def __post_init__(self) -> None:
        if self.seeds < 2:
            raise RedkitError(f"--seeds {self.seeds}: a study of seeds needs at least 2")
        if self.task not in TASKS_REPLICATED:
            raise RedkitError(f"--task {self.task}: the seeds study replicates {', '.join(TASKS_REPLICATED)}")
        if self.n is not None and self.task in ("digits", "clinc150", "fit"):
            raise RedkitError(f"--n: a {self.task} run uses every example of its source")
        if self.task == "fit" and not self.data_dir:
            raise RedkitError("--task fit: give the data directory with --data DIR")

    @property
    def compositions(self) -> tuple[str, ...]:
        return CLINC_COMPOSITIONS if self.task in ("clinc150", "fit") else COMPOSITIONS

    @property
    def claims(self) -> tuple[tuple[str, str], ...]:
        return CLINC_CLAIMS if self.task in ("clinc150", "fit") else CLAIMS


def replicate_config(config: SeedsConfig, seed: int) -> RunConfig | DigitsConfig:
    if config.task == "digits":
        run_config = DigitsConfig(seed=seed, data_seed=config.data_seed)
    else:
        n = config.n or TASKS[config.task].default_n
        run_config = RunConfig(
            task=config.task, seed=seed, data=DataConfig(task=config.task, n=n, seed=config.data_seed)
        )
    run_config.cap_epochs(config.max_epochs)
    return run_config


def replicate(out: Path, config: SeedsConfig, seed: int):
    """Train (or finish: every stage resumes) the run of one seed, on seed 0's data."""
    directory, first = out / f"seed-{seed}", out / "seed-0"
    quiet = lambda *_: None  # noqa: E731
    if config.task in ("clinc150", "fit"):
        return _replicate_fit(out, config, seed)
    if config.task == "digits":
        if seed > 0 and not (directory / "splits.json").exists():
            link_or_copy(first / "splits.json", directory / "splits.json")
        reproduce_digits(directory, replicate_config(config, seed), "all", print_fn=quiet)
        return DigitsRun(directory)
    if seed > 0:
        link_data(first / "data", directory / "data")
    _shared_cache(out, directory)
    reproduce(directory, replicate_config(config, seed), print_fn=quiet)
    return TaskRun(directory)


def _shared_cache(out: Path, directory: Path) -> None:
    """Every replicate's cache/ is one directory: its files' keys name the texts and the backbone."""
    if not (directory / "cache").exists():
        directory.mkdir(parents=True, exist_ok=True)
        (out / "cache").mkdir(exist_ok=True)
        os.symlink((out / "cache").resolve(), directory / "cache")


def _replicate_fit(out: Path, config: SeedsConfig, seed: int):
    """A fit run at `redkit fit`'s defaults with this seed: CLINC150 (the authors' split) or a data
    directory (its val carved with the seed where it has no val file)."""
    from redkit.api import fit

    directory = out / f"seed-{seed}"
    _shared_cache(out, directory)
    if config.task == "fit":
        return fit(config.data_dir, directory, seed=seed, max_epochs=config.max_epochs, print_fn=lambda *_: None).run
    from redkit.data.clinc150 import DEFAULT_DIR

    data_dir = config.data_dir or DEFAULT_DIR
    return fit(
        data_dir, directory, data_format="clinc150", seed=seed, max_epochs=config.max_epochs, print_fn=lambda *_: None
    ).run


def available(run, names: tuple[str, ...]) -> tuple[str, ...]:
    """`names` this run can score: red_per_domain and its oracle only where every label has one domain."""
    from redkit.compositions import default_compositions
    from redkit.references import REFERENCES

    usable = set(default_compositions(run.space)) | {
        r for r in getattr(run.config, "references", ()) if r in REFERENCES
    }
    return tuple(name for name in names if name in usable)


def predictions(run, names: tuple[str, ...], split: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """({composition or reference: predicted classes (N,)}, true classes (N,)) on `split`."""
    from redkit.references import REFERENCES

    h, classes, domains = run.split_tensors(split)
    modules = ModuleSet(run)

    def probs(name: str):
        if name in REFERENCES:  # a reference has its own features, of the split's texts
            return REFERENCES[name].probs(run, split, [ex.question for ex in run.splits[split]])
        return compose(name, modules, h, domains).probs

    return {name: probs(name).argmax(dim=-1).cpu().numpy() for name in names}, classes.numpy()


def mcnemar_exact(a_right: np.ndarray, b_right: np.ndarray) -> dict:
    """McNemar's exact test: of the examples exactly one of A and B gets right, is A's share 1/2?"""
    only_a, only_b = int((a_right & ~b_right).sum()), int((~a_right & b_right).sum())
    p = stats.binomtest(only_a, only_a + only_b, 0.5).pvalue if only_a + only_b else 1.0
    return {"only_a": only_a, "only_b": only_b, "p": float(p)}


def seeds_study(out: Path, config: SeedsConfig, print_fn=print) -> dict:
    start = time.perf_counter()
    out = Path(out)
    runs, wall = [], {}
    for seed in range(config.seeds):
        runs.append(replicate(out, config, seed))
        # What the replicate's stages took, as the run recorded them: a rerun that finds the
        # seeds trained (it resumes) reports the training, not its own few seconds.
        wall[seed] = sum(runs[-1].timings.values())
        print_fn(f"[seed {seed}] done: its stages took {wall[seed]:.0f} s")
    names = available(runs[0], config.compositions)
    per_seed = [predictions(run, names, config.split) for run in runs]  # [({name: pred}, true)]
    per_composition = {}
    for name in names:
        accuracy = [float((pred[name] == true).mean()) for pred, true in per_seed]
        macro_f1 = [
            float(f1_score(true, pred[name], labels=np.unique(true), average="macro", zero_division=0))
            for pred, true in per_seed
        ]
        per_composition[name] = {
            "accuracy": t_interval(accuracy) | {"per_seed": accuracy},
            "macro_f1": t_interval(macro_f1) | {"per_seed": macro_f1},
        }
    claims = []
    for a, b in [(a, b) for a, b in config.claims if a in names and b in names]:
        acc_a = np.array(per_composition[a]["accuracy"]["per_seed"])
        acc_b = np.array(per_composition[b]["accuracy"]["per_seed"])
        diffs = acc_a - acc_b
        p_t = paired_t_p(acc_a, acc_b)  # None when the differences do not vary: then we cannot tell
        mcnemar = [mcnemar_exact(pred[a] == true, pred[b] == true) for pred, true in per_seed]
        claims.append(
            {
                "a": a,
                "b": b,
                "mean_difference": float(diffs.mean()),
                "difference": t_interval(diffs),
                "paired_t_p": p_t,
                "mcnemar": mcnemar,
                # seeds where McNemar finds A (or B) significantly better at p < 0.05
                "seeds_significant": {
                    side: sum(m["p"] < 0.05 and m[f"only_{side}"] > m[f"only_{other}"] for m in mcnemar)
                    for side, other in (("a", "b"), ("b", "a"))
                },
                "verdict": verdict(diffs, p_t),
            }
        )
    return {
        "study": "seeds",
        "config": asdict(config),
        "seeds": list(range(config.seeds)),
        "n": int(len(per_seed[0][1])),
        "compositions": per_composition,
        "claims": claims,
        "wall_seconds_per_seed": wall,
        "seconds": time.perf_counter() - start,
    }
