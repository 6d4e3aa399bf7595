"""The iterative federated baselines at full strength on CLINC150's ten owners: Flower's FedAvg, FedProx and FedAdam
(`redkit federate --baseline-only`), each setting run until the owners' val accuracy stops rising (patience 3,
at most 50 rounds), the settings chosen on that val, never on test, then the best of them over 3 seeds.

    python scripts/federated_baselines.py --out runs/fed-baselines                  # every stage; rerun: resumes
    python scripts/federated_baselines.py --federate runs/federate-compact runs/federate-tuned-compact
                                                    # and RED's round (residual, tuned owners) in the figure
    python scripts/federated_baselines.py --out runs/fed-baselines --until fedavg   # the first stage only
    python scripts/federated_baselines.py --until fedavg --only "fedavg lr 0.001 E 3"   # one setting (a session's
                                                    worth): the others read where finished, skipped where not
    python scripts/federated_baselines.py --figure-only --federate RUN --oneshot runs/federated-oneshot/results.json
                                                    # redraw from OUT/summary.json, the one-shot baselines as points

    stage fedavg    the owners' AdamW rate × local epochs: lr 2e-4, 5e-4, 1e-3 × E 1, 3 (seed 0)
    stage fedprox   mu 0.01, 0.1 at FedAvg's best (lr, E) by val (Li et al.'s grid: 0.001 to 1)
    stage fedadam   the server's rate eta 1e-3, 1e-2 (Flower's beta 0.9, 0.99, tau 1e-3) at FedAvg's best (lr, E)
    stage seeds     the best setting of all by val, seeds 1 and 2 (seed 0 is its grid run)

Each setting is one `redkit federate` run under OUT/<setting>/ (its report, results.json and checkpoint): a run
killed at any round resumes at the next one when this is run again, a finished one is read, not run. OUT/summary.json
and OUT/accuracy_by_round.png gather them: for each, the round picked by the owners' val, its test accuracy, the
bytes exchanged to reach it (every owner, up + down, training messages; the evaluation messages apart), and the
table of them is printed (the results page's).

A finished setting's summary (its figures round by round and the provenance of the run that measured them) is also
written to RECORD/<setting>.json (--record, default docs/results/federated_baselines/: a few kB each, committed),
and read from there where OUT has no run of it: the grid goes on across machines and sessions whose run
directories are gone, one setting at a time (--only), and the table and figure show every setting recorded.
Settings finished before the record existed are not in it: --chosen names FedAvg's best of them by val (the results
page's table) for the later stages, which are then built from it instead of from the record's FedAvg settings.
"""

import redkit

redkit.reproducible()  # the CLI's kernels (before torch is imported)

import argparse  # noqa: E402
import statistics  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

from redkit.atomic import write_json  # noqa: E402
from redkit.errors import RedkitError  # noqa: E402
from redkit.federated.federate import FederateConfig, federate  # noqa: E402
from redkit.federated.report import cumulative_bytes, plot_oneshot, red_round_bytes  # noqa: E402
from redkit.federated.strategies import IterativeConfig  # noqa: E402
from redkit.jsonfile import read_json  # noqa: E402
from redkit.provenance import provenance  # noqa: E402

STAGES = ("fedavg", "fedprox", "fedadam", "seeds")
ROUNDS, PATIENCE = 50, 3
# the likelier settings first (a grid stopped half-way has them): lr 2e-4 at E 1 is the earlier default, still
# rising after 10 rounds
FEDAVG = [
    IterativeConfig("fedavg", lr=lr, local_epochs=e, patience=PATIENCE)
    for lr, e in ((5e-4, 1), (1e-3, 1), (5e-4, 3), (1e-3, 3), (2e-4, 1), (2e-4, 3))
]


def name_of(config: IterativeConfig, seed: int) -> str:
    return config.label().replace(" ", "-") + f"-s{seed}"


def run_one(args, config: IterativeConfig, seed: int) -> dict:
    """The setting's `redkit federate --baseline-only` run (resumed where it stopped; read if finished)."""
    out = args.out / name_of(config, seed)
    if (out / "results.json").is_file():
        return read_json(out / "results.json", "a baseline run's results")
    federate_config = FederateConfig(str(args.data), str(out), rounds=ROUNDS, iterative=config, red=False, seed=seed)
    return federate(replace(federate_config, joint_epochs=0, one_machine=False))


def finished(args, config: IterativeConfig, seed: int) -> dict | None:
    """The setting's summary if it has finished: from its run under OUT, else from the record; None if neither."""
    name = name_of(config, seed)
    if (args.out / name / "results.json").is_file():
        return summary_of(run_one(args, config, seed))
    if (args.record / f"{name}.json").is_file():
        recorded = read_json(args.record / f"{name}.json", "a baseline setting's record")
        if recorded.get("setting") != config.label() or recorded.get("seed") != seed:
            raise RedkitError(
                f"{args.record / name}.json: it records {recorded.get('setting')!r}, seed "
                f"{recorded.get('seed')!r}, not {config.label()!r}, seed {seed}"
            )
        return recorded
    return None


def summary_of(results: dict) -> dict:
    ledger, best = results["fedavg"], results["iterative"]["best"]
    upto = [r for r in ledger if r["round"] <= best["round"]]
    return {
        "setting": results["iterative"]["label"],
        "seed": results["config"]["seed"],
        "rounds_run": len(ledger),
        "stopped": results["iterative"]["stopped"],
        "best_round": best["round"],
        "val_accuracy": best["val_accuracy"],
        "test_accuracy": best["accuracy"],
        "bytes_to_best": sum(r["bytes_up"] + r["bytes_down"] for r in upto),
        "evaluation_bytes_to_best": sum(r.get("eval_bytes_up", 0) + r.get("eval_bytes_down", 0) for r in upto),
        "seconds_to_best": best["seconds"],
        "by_round": [
            {k: r.get(k) for k in ("round", "val_accuracy", "accuracy", "bytes_up", "bytes_down")} for r in ledger
        ],
        "provenance": results.get("provenance"),  # the run that measured it: commit, versions, machine
    }


def best_of(done: list[dict]) -> dict:
    return max(done, key=lambda s: s["val_accuracy"])  # the first of ties: the grid's order


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/clinc150"))
    parser.add_argument("--out", type=Path, default=Path("runs/fed-baselines"))
    parser.add_argument("--until", choices=STAGES, default=STAGES[-1], help="the last stage to run (default: all)")
    parser.add_argument(
        "--federate", type=Path, nargs="+", default=[], help="`redkit federate` runs whose RED round the figure shows"
    )
    parser.add_argument(
        "--oneshot", type=Path, help="scripts/federated_oneshot.py's results.json: its methods as points in the figure"
    )
    parser.add_argument(
        "--figure-only", action="store_true", help="redraw the figure from OUT/summary.json, run nothing"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        default=[],
        metavar="SETTING",
        help='run only these settings (labels as the table gives them, e.g. "fedavg lr 0.001 E 3"); the others '
        "are read where finished and skipped where not",
    )
    parser.add_argument(
        "--record",
        type=Path,
        default=Path("docs/results/federated_baselines"),
        help="where each finished setting's summary is kept, and read where OUT has no run of it",
    )
    parser.add_argument(
        "--chosen",
        metavar="SETTING",
        help='FedAvg\'s best setting by val among settings finished before the record (e.g. "fedavg lr 0.0005 E 3"): '
        "the later stages are built from it",
    )
    args = parser.parse_args()
    if args.chosen and args.chosen not in {c.label() for c in FEDAVG}:
        parser.error(
            f"--chosen {args.chosen!r} is not one of FedAvg's settings: {', '.join(c.label() for c in FEDAVG)}"
        )
    red = [read_json(run / "results.json", "the federation's results") for run in args.federate]
    oneshot = read_json(args.oneshot, "the one-shot baselines' results") if args.oneshot else None
    if args.figure_only:
        runs = read_json(args.out / "summary.json", "the grid's summary")["runs"]
        figure(args.out, runs, red, oneshot)
        print(table(runs))
        return
    stages = STAGES[: STAGES.index(args.until) + 1]
    done: dict[str, dict] = {}
    extra: dict = {}

    def run(config: IterativeConfig, seed: int = 0) -> dict | None:
        name = name_of(config, seed)
        summary = finished(args, config, seed)
        if summary is None:
            if args.only and config.label() not in args.only:
                return None  # not asked for this time
            summary = summary_of(run_one(args, config, seed))
        if not (args.record / f"{name}.json").is_file():
            write_json(args.record / f"{name}.json", summary)
        done[name] = summary
        write_json(args.out / "summary.json", {"runs": done, **extra, "provenance": provenance()})
        figure(args.out, done, red, oneshot)
        return summary

    fedavg = {c.label(): summary for c in FEDAVG if (summary := run(c))}
    if args.chosen:  # FedAvg's grid finished before the record: its choice as the results page gives it
        extra["fedavg_chosen"] = f"{args.chosen} (--chosen: settings finished before the record)"
        fedavg_best = args.chosen
    elif fedavg:
        fedavg_best = best_of(list(fedavg.values()))["setting"]  # of those run
    else:  # --only named no FedAvg setting and none has finished: nothing to pick a best from
        print(table(done))
        return
    best = next(c for c in FEDAVG if c.label() == fedavg_best)
    later = {
        "fedprox": [replace(best, strategy="fedprox", proximal_mu=mu) for mu in (0.01, 0.1)],
        "fedadam": [replace(best, strategy="fedadam", server_lr=eta) for eta in (1e-3, 1e-2)],
    }
    grid = {c.label(): c for c in FEDAVG}
    for stage in stages[1:3]:
        for config in later[stage]:
            run(config)
            grid[config.label()] = config
    if "seeds" in stages:
        if args.chosen:  # the best of all by val needs every setting's val, and the earlier ones are not recorded
            print(table(done))
            print("the seeds' stage picks the best of every setting by val: run it with the whole grid recorded")
            return
        chosen = best_of([s for s in done.values() if s["seed"] == 0])
        others = [run(grid[chosen["setting"]], seed) for seed in (1, 2)]
        if None in others:  # --only left them for a later run
            print(table(done))
            return
        tests = [chosen["test_accuracy"]] + [summary["test_accuracy"] for summary in others]
        extra["seeds"] = {"setting": chosen["setting"], "tests": tests, "mean": statistics.mean(tests)}
        extra["seeds"]["sd"] = statistics.stdev(tests)
        write_json(args.out / "summary.json", {"runs": done, **extra, "provenance": provenance()})
    print(table(done))


def table(done: dict[str, dict]) -> str:
    """The settings run, as the results page gives them (markdown)."""
    rows = [
        "| setting | seed | rounds run | round val picks | val | test there | best test of any round | GB to it "
        "(training) | GB (evaluation) | seconds to it |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in done.values():
        tests = [r for r in s["by_round"] if r["accuracy"] is not None]
        top = max(tests, key=lambda r: r["accuracy"])
        rows.append(
            f"| {s['setting']} | {s['seed']} | {s['rounds_run']} | {s['best_round']} | {s['val_accuracy']:.4f} "
            f"| {s['test_accuracy']:.4f} | {top['accuracy']:.4f} (round {top['round']}) | {s['bytes_to_best'] / 1e9:.2f} "
            f"| {s['evaluation_bytes_to_best'] / 1e9:.2f} | {s['seconds_to_best']:,.0f} |"
        )
    return "\n".join(rows)


def figure(out: Path, done: dict[str, dict], red: list[dict], oneshot: dict | None) -> None:
    """Test accuracy by bytes exchanged and by round, one line per setting (seed 0), each one's round picked by val
    ringed; RED's one round a star for each `redkit federate` run's results in `red` (residual or tuned owners),
    each one-shot baseline a point at its val-chosen setting (`oneshot`: federated_oneshot.py's results; bytes up
    as sent, and its plan down to every owner)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_bytes, by_round) = plt.subplots(1, 2, figsize=(11.0, 4.4), sharey=True)
    for s in (s for s in done.values() if s["seed"] == 0):
        rows = [r for r in s["by_round"] if r["accuracy"] is not None]
        xs = [b / 1e9 for b in cumulative_bytes(rows)]
        (line,) = by_bytes.plot(xs, [r["accuracy"] for r in rows], ".-", lw=1, label=s["setting"])
        by_round.plot([r["round"] for r in rows], [r["accuracy"] for r in rows], ".-", lw=1, c=line.get_color())
        picked = next(i for i, r in enumerate(rows) if r["round"] == s["best_round"])
        ring = {"marker": "o", "ms": 10, "mfc": "none", "c": line.get_color()}
        by_bytes.plot([xs[picked]], [rows[picked]["accuracy"]], **ring)
        by_round.plot([rows[picked]["round"]], [rows[picked]["accuracy"]], **ring)
    for results, colour in zip(red, ("r", "m", "k"), strict=False):
        experts, round_ = results["config"].get("owner_experts", "residual"), results["red"]
        style = {"marker": "*", "ms": 14, "c": colour, "ls": "none"}
        by_bytes.plot(
            [red_round_bytes(round_) / 1e9], [round_["accuracy"]], **style, label=f"RED, {experts} owners, one round"
        )
        by_round.plot([1], [round_["accuracy"]], **style)
    if oneshot:
        plot_oneshot(by_bytes, by_round, oneshot["methods"], len(oneshot["setting"]["owners"]), 1e9, ["0.3"])
    by_bytes.set_xscale("log")
    by_bytes.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    by_bytes.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda t, _: f"{t:g}"))
    by_bytes.set_xlabel("bytes exchanged, every owner, up + down (GB, log scale; training messages, as sent)")
    by_round.set_xlabel("rounds (ringed: the round the owners' val picks)")
    by_bytes.set_ylabel("test accuracy (in scope)")
    by_bytes.set_ylim(0.80, 0.97)
    by_bytes.legend(fontsize=7, loc="lower right")
    for ax in (by_bytes, by_round):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "accuracy_by_round.png", dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
