"""RUN/report.md and RUN/accuracy_vs_bytes.png of `redkit federate`: RED's one round against the iterative
baseline's rounds (FedAvg, FedProx or FedAdam)."""

from pathlib import Path

from redkit.atomic import write_text

FIGURE = "accuracy_vs_bytes.png"


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def baseline_label(results: dict) -> str:
    """The iterative baseline's name and settings, e.g. "fedavg lr 0.0002 E 1" ("FedAvg": a run before them)."""
    return results.get("iterative", {}).get("label", "FedAvg")


def oneshot_bytes(method: dict, owners: int) -> int:
    """Bytes a one-shot baseline exchanges (scripts/federated_oneshot.py's figures for one method): every owner's
    upload as RED's module files travel, in the compact form (redkit/federated/compact.py; its float arrays' bytes
    in results written before it), and its plan sent down to every owner."""
    up = method.get("compact_bytes_up_per_owner", {}).get("total", method["bytes_up_total"])
    return up + method["bytes_down_per_owner"] * owners


def cumulative_bytes(rows: list[dict]) -> list[int]:
    """Bytes exchanged up to and including each round (every owner, up + down) of a baseline's ledger rows."""
    total, out = 0, []
    for r in rows:
        total += r["bytes_up"] + r["bytes_down"]
        out.append(total)
    return out


def red_round_bytes(red: dict) -> int:
    """Bytes RED's one round exchanges: its contributions and plan, and SecAgg+'s messages where it summed the
    scatters (--secure-aggregation)."""
    secure = red.get("secure_sum", {})
    return red["bytes_up"] + red["bytes_down"] + secure.get("bytes_up", 0) + secure.get("bytes_down", 0)


def plot_oneshot(by_bytes, by_round, methods: dict, owners: int, scale: float, colours) -> None:
    """Each one-shot baseline (scripts/federated_oneshot.py's `methods`) a point at round 1 and at its bytes / `scale`,
    a marker of its own, colours taken in turn from `colours`."""
    for i, (method, m) in enumerate(methods.items()):
        style = {"marker": "sDv^P<>ph"[i % 9], "ms": 8, "ls": "", "c": colours[i % len(colours)]}
        by_bytes.plot([oneshot_bytes(m, owners) / scale], [m["test_accuracy"]], **style, label=f"{method}, one round")
        by_round.plot([1], [m["test_accuracy"]], **style)


def figure(out: Path, results: dict, oneshot: dict | None = None, name: str = FIGURE) -> str | None:
    """Test accuracy against bytes exchanged (every owner, up + down) and against rounds: FedAvg a line, RED a
    star, each one-shot baseline (`oneshot`: scripts/federated_oneshot.py's methods) a point, the central joint a
    dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fedavg = [r for r in results["fedavg"] if "accuracy" in r]
    red = results["red"]  # {} where the baseline ran alone
    fig, (by_bytes, by_round) = plt.subplots(1, 2, figsize=(11.0, 4.2), sharey=True)
    if fedavg:
        xs = [b / 1e6 for b in cumulative_bytes(fedavg)]
        label = f"{baseline_label(results)} (joint fine-tune), after each round"
        by_bytes.plot(xs, [r["accuracy"] for r in fedavg], "o-", label=label)
        by_round.plot([r["round"] for r in fedavg], [r["accuracy"] for r in fedavg], "o-", label=label)
    colours = [c for i, c in enumerate(plt.get_cmap("tab10").colors) if i not in (0, 3)]  # FedAvg's blue, RED's red
    if oneshot:
        plot_oneshot(by_bytes, by_round, oneshot, len(red["owners"]), 1e6, colours)
    if red:
        by_bytes.plot([red_round_bytes(red) / 1e6], [red["accuracy"]], "r*", ms=14, label="RED, one round")
        by_round.plot([1], [red["accuracy"]], "r*", ms=14)
    if "joint_central" in results:
        for ax in (by_bytes, by_round):
            ax.axhline(results["joint_central"]["accuracy"], ls="--", c="gray", label="joint, trained centrally")
    by_bytes.set_xscale("log")
    by_bytes.set_xlabel("bytes exchanged, every owner, up + down (MB, log scale)")
    by_round.set_xlabel("rounds")
    by_bytes.set_ylabel("test accuracy (in scope)")
    by_bytes.legend(loc="lower left", fontsize=7)
    for ax in (by_bytes, by_round):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / name, dpi=120)
    plt.close(fig)
    return name


def render(results: dict, picture: str | None) -> str:
    red, baseline = results["red"], baseline_label(results)
    lines = [f"# RED over Flower ({results['runtime']} runtime) against {baseline}", ""]
    if red:
        left_out = {**red["missing"], **red["refused"]}
        lines += [
            f"{len(red['domains'])} domains from {len(red['owners'])} owners"
            + (f"; left out: {', '.join(f'{o} ({why})' for o, why in left_out.items())}" if left_out else "")
            + ".",
            "",
        ]
    lines += ["| method | rounds | test accuracy | bytes up | bytes down | seconds |", "|---|---|---|---|---|---|"]
    if red:
        lines.append(
            f"| **RED** (one round) | 1 | {red['accuracy']:.4f} | {_mb(red['bytes_up'])} | {_mb(red['bytes_down'])} "
            f"| {red['seconds']:.0f} |"
        )
    if secure := red.get("secure_sum"):
        lines.append(
            f"| and its scatters summed by SecAgg+ (in that round) | - | - | {_mb(secure['bytes_up'])} | "
            f"{_mb(secure['bytes_down'])} | {secure['seconds']:.0f} |"
        )
    up = down = 0
    for r in results["fedavg"]:
        up, down = up + r["bytes_up"], down + r["bytes_down"]
        acc = f"{r['accuracy']:.4f}" if "accuracy" in r else "-"
        val = f" (val {r['val_accuracy']:.4f})" if "val_accuracy" in r else ""
        lines.append(
            f"| {baseline}, after round {r['round']}{val} | {r['round']} | {acc} | {_mb(up)} | {_mb(down)} "
            f"| {r['seconds']:.0f} |"
        )
    if best := results.get("iterative", {}).get("best"):
        lines += [
            "",
            f"{baseline}: stopped ({results['iterative'].get('stopped', '?')}); the round by the owners' val: "
            f"{best['round']} (val {best['val_accuracy']:.4f}, test {best.get('accuracy', float('nan')):.4f}). "
            "Its evaluation messages (each owner scoring the new weights on its val) are not in the bytes above.",
            "",
        ]
    if "joint_central" in results:
        j = results["joint_central"]
        kept = f"; epoch {j['best_epoch']} of {j['epochs']} kept by the pooled val" if "best_epoch" in j else ""
        lines.append(
            f"| joint, centrally (no owner may{kept}) | - | {j['accuracy']:.4f} | - | - | {j['seconds']:.0f} |"
        )
    if "one_machine" in results:
        lines += [
            "",
            f"The same recipe in one process: accuracy {results['one_machine']['accuracy']:.4f} in "
            f"{results['one_machine']['seconds']:.0f} s; the {results['modules_compared']} modules' weights are "
            + ("byte-identical (sha256)." if results["same_modules"] else "**not** byte-identical (sha256)."),
        ]
    if "deployment" in results:
        seconds = results["deployment"]["seconds"]
        lines += [
            "",
            f"Deployment runtime: {results['deployment']['processes']} processes (a SuperLink, a SuperNode per owner) "
            f"up in {seconds['start']:.1f} s; `flwr run` to the run's end {seconds['run']:.0f} s; RED's round, "
            f"first message to the model assembled, {red['assembled_seconds']:.0f} s"
            + (
                f" ({red['assembled_seconds'] / results['one_machine']['seconds']:.2f} x the one-process recipe)"
                if "one_machine" in results
                else ""
            )
            + f"; the processes stopped in {seconds['stop']:.1f} s.",
        ]
    if picture:
        lines += ["", f"![accuracy against bytes exchanged]({picture})"]
    return "\n".join(lines) + "\n"


def write_report(out: Path, results: dict) -> str:
    text = render(results, figure(out, results))
    write_text(out / "report.md", text)
    return text
