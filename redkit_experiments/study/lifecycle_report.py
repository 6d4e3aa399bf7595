"""The report of `redkit study lifecycle`: a table per operation, the targets, one figure."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from redkit.report import markdown_table, save_figure  # noqa: E402

TARGETS = (
    "adding a domain costs ≤ 5 % of retraining joint; overall accuracy after adding within 0.5 points of the "
    "run trained on all domains; the old domains lose ≤ 0.5 points"
)


def _p(x) -> str:
    return "–" if x is None else f"{100 * x:.2f}"


def _d(a, b) -> str:
    return "–" if a is None or b is None else f"{100 * (a - b):+.2f}"


def _stages(stages: dict | None) -> str:
    return "–" if not stages else ", ".join(f"{k} {v:.0f}" for k, v in stages.items())


def figure(path: Path, result: dict, name: str) -> str:
    """Overall accuracy vs seconds: one point per added domain, the run fitted on all domains, joint."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    adds = [(r["seconds"], r["after"][name]["overall"], r["domain"]) for r in result["add"] if name in r["after"]]
    ax.scatter(
        [s for s, _, _ in adds], [100 * a for _, a, _ in adds], color="C0", label=f"{name}: 9 domains + the added one"
    )
    for s, a, d in adds:
        ax.annotate(d, (s, 100 * a), fontsize=6, xytext=(3, 2), textcoords="offset points")
    fresh = [
        (r["fresh"]["seconds"], r["fresh"]["after"][name]["overall"])
        for r in result["add"]
        if r.get("fresh") and name in r["fresh"]["after"]
    ]
    if fresh:
        ax.scatter(
            [s for s, _ in fresh],
            [100 * a for _, a in fresh],
            color="C4",
            marker="D",
            label=f"{name}: added to a 9-domain fit from scratch",
        )
    ref, full = result["reference"], result["full_results"]
    if name in full:
        ax.scatter(
            [ref["red_fit_seconds"]],
            [100 * full[name]["overall"]],
            color="C1",
            marker="s",
            label=f"{name}: fitted on all domains",
        )
    on_all = [
        (r["joint_retrained"]["seconds"], r["joint_retrained"]["overall"])
        for r in result["add"]
        if r.get("joint_retrained")
    ]
    if not on_all and ref.get("joint_seconds") and "joint" in full:
        on_all = [(ref["joint_seconds"], full["joint"]["overall"])]
    if on_all:
        ax.scatter(
            [s for s, _ in on_all],
            [100 * a for _, a in on_all],
            color="C2",
            marker="^",
            label="joint retrained on all domains",
        )
    retrains = [
        (r["joint_retrained"]["seconds"], r["joint_retrained"]["overall"])
        for r in result["remove"]
        if r.get("joint_retrained")
    ]
    if ref.get("estimated_joint_seconds") and not on_all and not retrains and "red" in full:
        ax.axvline(
            ref["estimated_joint_seconds"],
            color="C2",
            linestyle="--",
            linewidth=1,
            label="joint retrain, estimated from stage base (not measured)",
        )
    if retrains:
        ax.scatter(
            [s for s, _ in retrains],
            [100 * a for _, a in retrains],
            color="C3",
            marker="v",
            label="joint retrained on 9 domains",
        )
    fits = [r["fresh"]["fit_seconds"] for r in result["add"] if r.get("fresh")]
    for s_fit in fits:
        ax.axvline(s_fit, color="C4", linestyle=":", linewidth=1)
    if fits:
        ax.plot([], [], color="C4", linestyle=":", label="RED refitted on 9 domains (seconds)")
    ax.set_xscale("log")
    ax.set_xlabel("seconds (wall)")
    ax.set_ylabel(f"overall accuracy, % ({result['config']['split']})")
    ax.set_title("Adding a domain vs retraining")
    ax.grid(alpha=0.3)
    ax.margins(y=0.1)
    ax.legend(fontsize=7, loc="center right")  # adds sit top left, refits top right, joint below: the middle is free
    return save_figure(fig, path)


def _retrains(rows: list[dict]) -> list[float]:
    return [r["joint_retrained"]["seconds"] for r in rows if r.get("joint_retrained")]


def joint_seconds(result: dict) -> tuple[float | None, str]:
    """The seconds of retraining joint, and how they were obtained: this study's own retrains on all
    domains (what an add replaces; same machine, same load), else on 9 domains, else the run's
    joint stage, else an estimate."""
    ref = result["reference"]
    for rows, on in ((result["add"], "all domains"), (result["remove"], "9 domains")):
        if retrains := _retrains(rows):
            return sum(retrains) / len(
                retrains
            ), f"measured: mean of this study's {len(retrains)} joint retrain(s) on {on}"
    if ref.get("joint_seconds"):
        return ref["joint_seconds"], "measured: the run's own joint stage"
    if ref.get("estimated_joint_seconds"):
        return ref["estimated_joint_seconds"], "estimated from stage base, not measured"
    return None, "no joint"


def targets(result: dict, name: str) -> list[list[str]]:
    """The issue's three targets for composition `name`, worst case over the added domains."""
    adds = [r for r in result["add"] if name in r["after"]]
    if not adds:
        return []
    cost = max(r["seconds"] for r in adds)
    gap = min(r["after"][name]["overall"] - r["full"][name]["overall"] for r in adds)
    loss = min(r["after"][name]["others"] - r["parent"][name]["overall"] for r in adds)
    joint_s, what = joint_seconds(result)
    return [
        [
            name,
            f"seconds to add (slowest) / seconds to retrain joint ({what})",
            f"{cost:.1f} / {joint_s:.0f} = {cost / joint_s:.1%}" if joint_s else f"{cost:.1f} / –",
            "≤ 5 %",
            ("yes" if cost <= 0.05 * joint_s else "no") if joint_s else "no joint",
        ],
        [
            name,
            "overall after adding − RED on all (points, worst domain)",
            f"{100 * gap:+.2f}",
            "≥ −0.5",
            "yes" if gap >= -0.005 else "no",
        ],
        [
            name,
            "other 9 after adding − before (points, worst domain)",
            f"{100 * loss:+.2f}",
            "≥ −0.5",
            "yes" if loss >= -0.005 else "no",
        ],
    ]


def lifecycle_report(directory: Path, result: dict) -> str:
    names, split = result["compositions"], result["config"]["split"]
    main = (
        "red" if "red" in names else "red_per_domain"
    )  # the flagship; red_per_domain and the others in the tables below
    ref = result["reference"]
    seconds, load = result.get("study_seconds", {}), result.get("load_average", {})
    lines = [
        "# Life cycle: each domain removed and added back",
        "",
        f"Run: {result['run']}. Split: {split}. Compositions: {', '.join(names)}. Main composition: {main}.",
        "",
        "## What each compared system saw",
        "",
        "- **added** (`RUN − d + d`): the 9-domain parent is `RUN − d` (remove-domain), which shares RUN's stage base "
        f"(tuned backbone top, classifier C) and cached features; stage base was tuned on {ref['base_fraction']:.0%} of RUN's "
        "train, d's examples included, and C has rows for d's labels, masked in `RUN − d`. The add trains d's experts, head "
        "and label rows for d's labels alone on d's data, then router and gate over all domains: d's labels are output "
        "only by modules trained on d alone. No add retrains stage base or re-encodes an old domain's text. This is the "
        "optimistic side of a truly new domain (features partly tuned with d); `--fresh-parents N` adds the control.",
        "- **RED on all** is RUN itself (every stage on all domains).",
        "- **joint on all** is RUN's own joint module (top layers + classifier fine-tuned on all of train)"
        + ("." if "joint" in names else "; this run has none, so no joint comparison.")
        + f" It is also retrained here on the data of the first {result['config'].get('joint_all_retrains', 0)} added "
        "run(s) (RUN's data): the seconds an add is compared with.",
        f"- **joint on 9** is retrained (stage base's recipe from the untuned backbone on the 9 domains' train, early-stopped "
        f"on their val) for the first {result['config']['joint_retrains']} domain(s) only (each costs a fine-tuning).",
        "",
        "Seconds: wall time of the command minus its evaluation"
        + (
            f", on a machine with {result['cpus']} CPUs whose 1-minute load average was {load['start']:.2f} when the study "
            f"started and {load['end']:.2f} when it ended (the study itself keeps it near {result['cpus']})"
            if load
            else ""
        )
        + ".",
        "",
    ]
    if seconds:
        lines += [
            f"The study took {seconds['total']:.0f} s: {seconds['adds_and_removes']:.0f} s "
            f"({seconds['adds_and_removes'] / 60:.1f} min) for its {len(result['remove'])} removes and "
            f"{len(result['add'])} adds with their evaluations, {seconds['joint_retrains_and_fresh_parents']:.0f} s for "
            "the joint retrains and fresh parents.",
            "",
        ]
    # ---- add
    rows = []
    for r in result["add"]:
        a, f, p = r["after"].get(main, {}), r["full"].get(main, {}), r["parent"].get(main, {})
        parent_others = p.get("overall")  # the parent's 9 domains = the added run's others
        rows.append(
            [
                r["domain"],
                f"{r['seconds']:.1f}",
                _stages(r.get("stages")),
                str(r["label_rows"]),
                _p(a.get("domain")),
                _p(f.get("domain")),
                _p(r["full"].get("joint", {}).get("domain")),
                _p(parent_others),
                _p(a.get("others")),
                _d(a.get("others"), parent_others),
                _p(a.get("overall")),
                _p(f.get("overall")),
                _d(a.get("overall"), f.get("overall")),
                _p(r["full"].get("joint", {}).get("overall")),
                str(r["unchanged"]),
            ]
        )
    lines += [
        f"## Add: each domain added to the others ({main}, accuracy %)",
        "",
        "s to add: the whole add-domain command but its evaluation; *of which* its training stages "
        "(label rows and experts, heads, router, gate; the rest is data, copies and encoding d's train and val texts). "
        "RED's stages (label rows, experts, router) and the baselines' (heads, gate) run as two processes at once "
        "where the machine has the cores (redkit/train/parallel.py), so their seconds overlap.",
        "",
        markdown_table(
            [
                "domain",
                "s to add",
                "of which",
                "label rows",
                "on d: added",
                "on d: RED all",
                "on d: joint all",
                "other 9: before add",
                "other 9: after",
                "Δ other 9",
                "overall: added",
                "overall: RED all",
                "Δ vs RED all",
                "overall: joint all",
                "copies identical",
            ],
            rows,
        ),
        "",
    ]
    for r in result["add"]:
        if joint := r.get("joint_retrained"):
            lines += [
                f"joint retrained on all domains (the data of `RUN − {r['domain']} + {r['domain']}`, i.e. RUN's): "
                f"{joint['seconds']:.0f} s, overall {_p(joint['overall'])} % (RUN's own joint: "
                f"{_p(r['full'].get('joint', {}).get('overall'))} %).",
                "",
            ]
    # ---- the honest control: a parent whose stage base never saw d
    fresh = [r for r in result["add"] if r.get("fresh")]
    if fresh:
        rows = []
        for r in fresh:
            f, a, full = r["fresh"], r["after"].get(main, {}), r["full"].get(main, {})
            fa, fp = f["after"].get(main, {}), f["parent"].get(main, {})
            rows.append(
                [
                    r["domain"],
                    f"{f['fit_seconds']:.0f}",
                    f"{f['seconds']:.1f}",
                    _p(fa.get("domain")),
                    _p(a.get("domain")),
                    _p(full.get("domain")),
                    _p(fp.get("overall")),
                    _p(fa.get("others")),
                    _d(fa.get("others"), fp.get("overall")),
                    _p(fa.get("overall")),
                    _d(fa.get("overall"), full.get("overall")),
                ]
            )
        lines += [
            f"## Control: d added to RED fitted from scratch on the others ({main}, accuracy %)",
            "",
            "Here the parent is a full fit without d (its own stage base, which never saw d, and its own features): "
            "d's labels are new to it, as for a truly new domain. Compare with the shared-base add above.",
            "",
            markdown_table(
                [
                    "domain",
                    "s to fit the others",
                    "s to add",
                    "on d: added (fresh parent)",
                    "on d: added (shared base)",
                    "on d: RED all",
                    "others: before add",
                    "others: after",
                    "Δ others",
                    "overall: added",
                    "Δ vs RED all",
                ],
                rows,
            ),
            "",
        ]
    # ---- remove
    rows = []
    for r in result["remove"]:
        a, f = r["after"].get(main, {}), r["full"].get(main, {})
        joint = r.get("joint_retrained")
        rows.append(
            [
                r["domain"],
                f"{r['seconds']:.1f}",
                _stages(r.get("stages")),
                _p(a.get("overall")),
                _p(f.get("overall")),
                _d(a.get("overall"), f.get("overall")),
                _p(joint["overall"]) if joint else "not retrained",
                f"{joint['seconds']:.0f}" if joint else "–",
                str(r["unchanged"]),
            ]
        )
    lines += [
        f"## Remove: each domain taken out ({main}, accuracy % on the remaining domains)",
        "",
        markdown_table(
            [
                "domain",
                "s to remove",
                "of which",
                "remaining 9: after removal",
                "same 9 in RED all",
                "Δ",
                "joint retrained on the 9",
                "s joint retrain",
                "copies identical",
            ],
            rows,
        ),
        "",
    ]
    # ---- targets, for the flagship and for red_per_domain (where a domain's labels compete only with each other)
    rows = [row for name in dict.fromkeys((main, "red_per_domain")) if name in names for row in targets(result, name)]
    if rows:
        joint_s, what = joint_seconds(result)
        lines += ["## Targets", "", f"Targets of the issue: {TARGETS}.", ""]
        if what.startswith("estimated"):
            lines += [
                f"joint was not retrained here. Its recipe is stage base's on all of train instead of "
                f"{ref['base_fraction']:.0%}: RUN's stage base took {ref['base_seconds']:.0f} s, so a joint retrain costs "
                f"about {joint_s:.0f} s for as many epochs (an estimate from a measured time, labelled as such).",
                "",
            ]
        lines += [markdown_table(["composition", "measure", "measured", "target", "met"], rows), ""]
    lines += [
        "## Figure",
        "",
        f"![accuracy vs seconds]({figure(directory / 'figures' / 'add_vs_retrain.png', result, main)})",
        "",
    ]
    # ---- every composition
    rows = [
        [r["domain"], n, _p(s["domain"]), _p(s["others"]), _p(s["overall"]), _p(r["full"].get(n, {}).get("overall"))]
        for r in result["add"]
        for n, s in r["after"].items()
    ]
    lines += [
        "## Every composition after each add (accuracy %)",
        "",
        markdown_table(["domain", "composition", "on d", "other 9", "overall", "overall in RED all"], rows),
        "",
    ]
    return "\n".join(lines)
