"""The one table of `redkit reproduce peers` (markdown, printed and written to <run>/peers/report.md)."""

from redkit.report import LABELS, markdown_table, run_footer

PEER_LABELS = LABELS | {
    "lora_oracle": "LoRA experts, true domain (adapter_names)",
    "lora_red": "**LoRA experts mixed by RED's router**",
    "lora_uniform": "LoRA experts, uniform α",
    "lora_merge_linear": "peft merge, linear (1/K each)",
    "lora_merge_ties": "peft merge, TIES",
    "lora_arrow": "peft Arrow (training-free routing)",
    "lora_xlora": "peft X-LoRA (trained scalings, wrapped)",
}


def _f(x) -> str:
    return "—" if x is None else f"{x:.4f}"


def _routing(row: dict) -> str:
    if row["routing"] == "given":
        return "given"
    return _f(row["routing_accuracy"])


def _xlora_lines(xlora: dict | None) -> list[str]:
    if not xlora:
        return []
    out = ["## X-LoRA", ""]
    for attempt, what in (
        ("as_is", "on the Hugging Face model as is"),
        ("wrapped", "inside a `.model` wrapper, adapters named 0..K-1"),
    ):
        r = xlora[attempt]
        if not r["loads"]:
            out.append(f"- {what}: fails — `{r['error']}` ({r['where']})")
        elif "classifier" in r:
            c = r["classifier"]
            out.append(
                f"- {what}: loads and runs; its classifier ({c['trainable_parameters']:,} parameters) trained on "
                f"{c['examples']} examples, {c['epochs']} epochs, {c['seconds']:.1f} s: row `lora_xlora`"
            )
        else:
            out.append(f"- {what}: loads and runs")
    return out + [""]


def render_peers_report(results: dict) -> str:
    rows = results["rows"]
    lora = results["config"]["lora"]
    header = [
        "Composition",
        "Accuracy",
        "Range acc",
        "Routing acc",
        "Params / expert",
        "Train s / expert",
        "Latency ms / ex",
    ]
    table = [
        [
            PEER_LABELS.get(n, n),
            _f(r["accuracy"]),
            _f(r["range_accuracy"]),
            _routing(r),
            f"{r['parameters_per_expert']:,}" if r["parameters_per_expert"] else "—",
            f"{r['train_seconds_per_expert']:.1f}",
            f"{r['latency_ms_per_example']:.3f}",
        ]
        for n, r in rows.items()
    ]
    ranks = sorted({e["rank"] for e in results["experts"].values()})
    examples = sorted({e["metrics"]["examples"] for e in results["experts"].values()})
    out = [
        f"# {results['task']}: RED beside peft ({results['split']} split, n = {results['n']}, seed {results['seed']})",
        "",
        markdown_table(header, table),
        "",
        f"LoRA experts: rank {', '.join(map(str, ranks))}, alpha {lora['alpha']}, on "
        f"{len(next(iter(results['experts'].values()))['config']['target_modules'])} Linear modules of the top layers; "
        f"{', '.join(map(str, examples))} training examples each (cap {lora['examples'] or 'none'}), "
        f"at most {lora['train']['max_epochs']} epochs (patience {lora['train']['patience']}). "
        "Pooled rows: the run's own modules. Latency: top layers from the cached prefix + composition, per example "
        f"({results['distinct_texts']} distinct texts, batch {results['config']['batch_size']}, "
        f"{results.get('torch_threads', '?')} torch thread(s)); lora_red includes the "
        "base pass that feeds its router. Routing accuracy: top expert = true range "
        "(Arrow: its coefficients averaged over tokens and layers).",
        "",
    ]
    prepared = {n: r["prepare_seconds"] for n, r in rows.items() if r.get("prepare_seconds")}
    if prepared:
        out += [
            "Built once before timing (not in the latency): "
            + ", ".join(f"{n} {s:.1f} s" for n, s in prepared.items())
            + " (the merges' add_weighted_adapter, Arrow's model with its K adapters).",
            "",
        ]
    arrow = results.get("arrow_as_is")
    if arrow:
        out += [
            f"peft's own `create_arrow_model` on these experts (in {arrow['expert_layers']} Linear modules) puts its "
            f"router in {arrow['router_layers']}: "
            + (
                "it runs."
                if arrow["loads"]
                else f"fails — `{arrow['error']}` ({arrow['where']}); `lora_arrow` targets the router at the experts' modules only."
            ),
            "",
        ]
    out += _xlora_lines(results.get("xlora"))
    out += [f"Wall time of this command: {results['wall_seconds']:.1f} s.", ""]
    return "\n".join(out + run_footer({"provenance": results.get("provenance", {})}))
