"""Studies: the noise models do what their formulas say, `redkit study noise` and `redkit study
complexity` work on a trained run without touching it, and bad input is one line, exit code 2."""

import json
import shutil

import matplotlib.image
import pytest
import torch
from conftest import run_cli

from redkit.compositions import ModuleSet, compose
from redkit.run import open_run
from redkit_experiments.study.noise_models import NOISE_MODELS

K, N = 5, 4000


def _logits_and_truth(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    true = torch.randint(0, K, (N,), generator=gen)
    logits = 6.0 * torch.nn.functional.one_hot(true, K).float() + torch.randn(N, K, generator=gen)  # a good router
    return logits, true


def _alpha(model: str, level: float, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    logits, true = _logits_and_truth()
    return NOISE_MODELS[model].perturb(logits, true, level, torch.Generator().manual_seed(seed)), logits, true


@pytest.mark.parametrize("model", list(NOISE_MODELS))
def test_level_zero_is_the_router_and_every_alpha_is_a_distribution(model):
    alpha, logits, _ = _alpha(model, 0.0)
    assert torch.allclose(alpha, torch.softmax(logits, dim=-1), atol=1e-6)
    for level in NOISE_MODELS[model].levels:
        alpha = _alpha(model, level)[0]
        assert torch.allclose(alpha.sum(dim=-1), torch.ones(N), atol=1e-5) and (alpha >= 0).all()


def test_misrouting_always_picks_a_wrong_expert_and_each_about_equally():
    alpha, _, true = _alpha("misroute", 1.0)
    chosen = alpha.argmax(dim=-1)
    assert torch.equal(alpha.max(dim=-1).values, torch.ones(N))  # one-hot rows
    assert not (chosen == true).any()
    offsets = torch.bincount((chosen - true) % K, minlength=K)[1:].float() / N  # each wrong expert ~ 1/(K-1)
    assert torch.allclose(offsets, torch.full((K - 1,), 1 / (K - 1)), atol=0.03)


def test_misrouting_hits_about_a_fraction_p_of_the_examples():
    alpha, logits, true = _alpha("misroute", 0.3)
    hit = (alpha.argmax(dim=-1) != true).float().mean()
    assert abs(hit - 0.3) < 0.03


def test_neighbour_confusion_picks_an_adjacent_domain():
    alpha, _, true = _alpha("neighbour", 1.0)
    chosen = alpha.argmax(dim=-1)
    assert torch.equal((chosen - true).abs(), torch.ones(N, dtype=torch.long))
    assert (chosen[true == 0] == 1).all() and (chosen[true == K - 1] == K - 2).all()


def test_full_flattening_is_uniform_and_logit_noise_blurs_the_router():
    assert torch.allclose(_alpha("flatten", 1.0)[0], torch.full((N, K), 1 / K))
    clean_top = _alpha("logit", 0.0)[0].max(dim=-1).values.mean()
    noisy, _, true = _alpha("logit", 8.0)
    assert noisy.max(dim=-1).values.mean() < clean_top
    assert (noisy.argmax(dim=-1) != true).float().mean() > 0.2  # σ = 8 overrides a margin of 6 often


def test_the_same_draw_seed_gives_the_same_noise_and_another_seed_other_noise():
    assert torch.equal(_alpha("misroute", 0.2, seed=3)[0], _alpha("misroute", 0.2, seed=3)[0])
    assert not torch.equal(_alpha("misroute", 0.2, seed=3)[0], _alpha("misroute", 0.2, seed=4)[0])


@pytest.fixture(scope="module")
def study_run(tiny_run, tmp_path_factory):
    """A copy of the session's tiny task1 run with the noise and complexity studies run on it."""
    run = tmp_path_factory.mktemp("study") / "run"
    shutil.copytree(tiny_run, run)
    from redkit.cli import main

    assert main(["study", "noise", "--run", str(run), "--draws", "3"]) == 0
    assert main(["study", "complexity", "--run", str(run), "--repeats", "2"]) == 0
    assert main(["study", "ablation", "--run", str(run), "--experts", "2", "--experts", "10"]) == 0
    return run


def test_noise_study_covers_every_routed_composition_model_and_level(study_run):
    result = json.loads((study_run / "studies" / "noise" / "results.json").read_text())
    assert list(result["compositions"]) == [
        "moe",
        "red",
        "red_logit_experts",
        "red_per_domain",
        "red_mixture",
    ]  # red_per_domain: Task 1 ranges are a label structure
    for comp in result["compositions"].values():
        assert set(comp["models"]) == set(NOISE_MODELS)
        for model, m in comp["models"].items():
            assert m["levels"] == list(NOISE_MODELS[model].levels)
            assert all(len(a["draws"]) == 3 and a["low"] <= a["mean"] <= a["high"] for a in m["accuracy"])
            first = m["accuracy"][0]  # level 0: no noise, every draw the router's own accuracy
            assert first["draws"] == [comp["reference"]["router"]] * 3 and first["low"] == first["high"]
            assert 0.0 <= m["auc"] <= 1.0
        flat = comp["models"]["flatten"]["accuracy"][-1]["mean"]  # λ = 1 is the uniform mixture
        assert flat == pytest.approx(comp["reference"]["uniform"])
    assert result["provenance"]["git_commit"]


def test_the_noise_study_scores_compositions_as_the_pipeline_does(study_run):
    result = json.loads((study_run / "studies" / "noise" / "results.json").read_text())
    run = open_run(study_run)
    h, classes, labels = run.split_tensors("test")
    modules = ModuleSet(run)
    for name, reference in (("red", "router"), ("red_oracle", "oracle"), ("red_uniform", "uniform")):
        accuracy = float((compose(name, modules, h, labels).probs.argmax(-1) == classes).float().mean())
        assert result["compositions"]["red"]["reference"][reference] == pytest.approx(accuracy, abs=1e-9)
    assert result["compositions"]["moe"]["reference"]["router"] == pytest.approx(
        float((compose("moe", modules, h, labels).probs.argmax(-1) == classes).float().mean()), abs=1e-9
    )


def test_noise_study_writes_a_report_with_a_figure_per_model_and_leaves_the_run_alone(study_run, tiny_run):
    directory = study_run / "studies" / "noise"
    report = (directory / "report.md").read_text()
    for model in NOISE_MODELS:
        png = directory / "figures" / f"noise_{model}.png"
        assert f"![{model}](figures/noise_{model}.png)" in report
        assert matplotlib.image.imread(str(png)).shape[0] > 100
    for path in (tiny_run / "modules").rglob("*"):  # every module file of the run is unchanged
        if path.is_file():
            assert path.read_bytes() == (study_run / path.relative_to(tiny_run)).read_bytes()


def test_the_noise_study_is_the_same_twice(study_run, tmp_path):
    again = tmp_path / "again"
    shutil.copytree(study_run, again)
    from redkit.cli import main

    assert main(["study", "noise", "--run", str(again), "--draws", "3", "--model", "misroute"]) == 0
    first = json.loads((study_run / "studies" / "noise" / "results.json").read_text())
    second = json.loads((again / "studies" / "noise" / "results.json").read_text())
    for name in first["compositions"]:
        assert first["compositions"][name]["models"]["misroute"] == second["compositions"][name]["models"]["misroute"]


def test_complexity_counts_what_each_composition_uses(study_run):
    result = json.loads((study_run / "studies" / "complexity" / "results.json").read_text())
    comps, params = result["components"], result["module_parameters"]
    domains = open_run(study_run).space.domains
    residual = sum(params[f"experts/residual/{d}"] for d in domains)
    assert result["expert_sets"] == {
        "experts/residual": residual,
        "experts/logit": sum(params[f"experts/logit/{d}"] for d in domains),
        "heads": sum(params[f"heads/{d}"] for d in domains),
    }
    assert comps["red"]["parameters"] == params["classifier"] + residual + params["router"]
    assert comps["red_uniform"]["parameters"] == params["classifier"] + residual
    assert comps["moe"]["parameters"] == sum(params[f"heads/{d}"] for d in domains) + params["gate"]
    backbone = comps["backbone"]
    assert backbone["flops_per_example"] > 1000 * comps["router"]["flops_per_example"] > 0
    for row in comps.values():
        assert set(row["latency_ms"]) == {"1", "256"} and row["latency_ms"]["1"]["median"] > 0
        assert row["peak_memory_bytes"] >= 0
    assert backbone["peak_memory_bytes"] > comps["router"]["peak_memory_bytes"]
    assert "< 0.5% of the backbone FLOPs" in (study_run / "studies" / "complexity" / "report.md").read_text()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["noise", "--model", "gaussian"], "unknown noise model 'gaussian'"),
        (["noise", "--composition", "red_oracle"], "unknown routed composition 'red_oracle'"),
        (["noise", "--model", "misroute", "--level", "1.5"], "level 1.5 is outside [0.0, 1.0]"),
        (["noise", "--level", "0.5"], "--level applies to one noise model"),
        (["noise", "--draws", "1"], "--draws must be at least 2"),
        (["noise", "--split", "dev"], "--split dev: this run has no such split"),
        (["complexity", "--repeats", "0"], "--repeats must be at least 1"),
        (["ablation", "--experts", "1"], "an ablation of the number of experts needs K >= 2"),
        (["ablation", "--part", "heads"], "unknown ablation 'heads'"),
    ],
)
def test_bad_study_input_is_one_line_and_exit_code_2(study_run, capsys, argv, message):
    code, _, err = run_cli(["study", *argv, "--run", study_run], capsys)
    assert code == 2 and err.count("\n") == 1 and message in err, err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["study", "nosie"], "unknown study 'nosie'; did you mean 'noise'?"),
        (["study", "seeds", "--seeds", "0"], "--seeds 0: a study of seeds needs at least 2"),
        (
            ["study", "seeds", "--task", "task3"],
            "--task task3: the seeds study replicates task1, task2, digits, clinc150",
        ),
        (["study", "seeds", "--task", "digits", "--n", "100"], "--n: a digits run uses every example of its source"),
        (["reproduce", "task1", "--experts", "1"], "--experts 1: the number of experts must be between 2 and 99"),
        (["report", "--run", "nowhere"], "nowhere: no report.md and no studies/"),
    ],
)
def test_bad_input_without_a_run_is_one_line_and_exit_code_2(capsys, argv, message):
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_a_study_names_the_module_the_run_lacks(study_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(study_run, run)
    shutil.rmtree(run / "modules" / "gate")
    code, _, err = run_cli(["study", "noise", "--run", run, "--composition", "moe", "--draws", "2"], capsys)
    assert code == 2 and "composition moe needs a trained gate" in err and err.count("\n") == 1
    code, out, _ = run_cli(["study", "noise", "--run", run, "--draws", "2", "--model", "flatten"], capsys)
    assert (
        code == 0 and "moe" not in json.loads((run / "studies" / "noise" / "results.json").read_text())["compositions"]
    )


def test_the_html_report_holds_the_run_and_every_study_with_images_that_decode(study_run, capsys):
    import base64
    import io
    from html.parser import HTMLParser

    code, out, _ = run_cli(["report", "--run", study_run], capsys)
    assert code == 0 and out.strip().endswith("report.html")

    class Collect(HTMLParser):
        def __init__(self):
            super().__init__()
            self.images, self.tables, self.sections = [], 0, []

        def handle_starttag(self, tag, attrs):
            attrs = dict(attrs)
            if tag == "img":
                self.images.append(attrs["src"])
            elif tag == "table":
                self.tables += 1
            elif tag == "section":
                self.sections.append(attrs["id"])

    page = Collect()
    page.feed((study_run / "report.html").read_text())
    assert page.sections == ["run", "noise", "ablation", "complexity"]
    assert page.tables >= 10
    assert len(page.images) >= 2 + len(NOISE_MODELS)  # the run's own figures and one per noise model
    for src in page.images:
        assert src.startswith("data:image/png;base64,")  # self-contained: no file, no network
        image = matplotlib.image.imread(io.BytesIO(base64.b64decode(src.split(",", 1)[1])), format="png")
        assert image.shape[0] > 50 and image.shape[1] > 50


def test_rank_ablation_trains_each_rank_alone_and_reuses_the_runs_own(study_run):
    result = json.loads((study_run / "studies" / "ablation" / "results.json").read_text())
    d, k = result["feature_dim"], 5
    rows = {r["divisor"]: r for r in result["rank"]}
    assert list(rows) == [2, 4, 8, 16, 32]
    for divisor, row in rows.items():
        r = d // divisor
        assert row["rank"] == r and row["parameters"] == k * (
            d * r + r + r * d + d
        )  # down (d->r) and up (r->d) per expert
        assert row["own"] == (divisor == 4)
        trained = study_run / "studies" / "ablation" / f"rank-{r}" / "modules" / "experts" / "residual" / "R1"
        assert (trained / "model.safetensors").is_file() != row["own"]
        assert 0.0 <= row["scores"]["red"]["accuracy"] <= 1.0
    own = rows[4]["scores"]["red"]["accuracy"]
    run_red = json.loads((study_run / "results.json").read_text())["splits"]["test"]["red"]["accuracy"]
    assert own == pytest.approx(run_red)  # the run's own rank is scored exactly as the pipeline scored it


def test_experts_ablation_retrains_experts_router_gate_and_heads_for_each_k(study_run):
    result = json.loads((study_run / "studies" / "ablation" / "results.json").read_text())
    assert [r["experts"] for r in result["experts"]] == [2, 10]
    for row in result["experts"]:
        k = row["experts"]
        modules = study_run / "studies" / "ablation" / f"experts-{k}" / "modules"
        for kind in ("experts/residual", "heads"):
            assert sorted(p.name for p in (modules / kind).iterdir()) == sorted(f"part{i + 1}of{k}" for i in range(k))
        router = json.loads((modules / "router" / "config.json").read_text())
        assert router["config"]["num_experts"] == k and (modules / "gate" / "model.safetensors").is_file()
        assert set(row["scores"]) == {"red", "red_oracle", "red_uniform", "moe", "oracle", "uniform"}
    correction = {r["place"]: r for r in result["correction"]}
    assert set(correction) == {"residual", "logit", "heads"}
    counted = json.loads((study_run / "studies" / "complexity" / "results.json").read_text())["module_parameters"]
    domains = open_run(study_run).space.domains
    for place, kind in (("residual", "experts/residual"), ("logit", "experts/logit"), ("heads", "heads")):
        assert correction[place]["parameters"] == sum(counted[f"{kind}/{d}"] for d in domains) > 0
    assert "## Bottleneck rank (§4.9.3)" in (study_run / "studies" / "ablation" / "report.md").read_text()


def test_equal_width_domains_cover_the_classes_in_order():
    from redkit_experiments.arithmetic.space import ANSWER_RANGES

    space = ANSWER_RANGES.in_equal_parts(10)
    domains = space.domain_of_class(torch.arange(space.num_classes))
    assert domains[0] == 0 and domains[-1] == 9 and (domains.diff() >= 0).all()
    assert set(torch.bincount(domains).tolist()) <= {9, 10}  # 99 classes in 10 parts of 9 or 10
    with pytest.raises(Exception, match="between 2 and 99"):
        ANSWER_RANGES.in_equal_parts(100)


def test_base_ablation_retrains_every_stage_in_a_child_run(study_run, tmp_path):
    from redkit_experiments.study.ablation import AblationConfig, ablate_base

    run = open_run(study_run)
    rows = ablate_base(run, tmp_path / "ablation", AblationConfig(base_fractions=(0.5,)))
    child = tmp_path / "ablation" / "base-0.5"
    assert rows[0]["base_examples"] == len(json.loads((child / "data" / "base_subset.json").read_text()))
    assert rows[0]["base_examples"] > len(json.loads((study_run / "data" / "base_subset.json").read_text()))
    assert (child / "modules" / "backbone_top" / "model.safetensors").is_file()
    assert (child / "modules" / "gate" / "model.safetensors").is_file()
    assert set(rows[0]["scores"]) == {"base_classifier", "red", "moe", "global_head"}


@pytest.mark.slow
def test_seeds_study_replicates_on_the_same_data_and_tests_each_claim(tmp_path, capsys):
    out = tmp_path / "seeds"
    code, printed, err = run_cli(
        ["study", "seeds", "--task", "task1", "--seeds", "2", "--n", "300", "--max-epochs", "1", "--out", out], capsys
    )
    assert code == 0, err
    seed0, seed1 = (out / f"seed-{s}" / "data" / "train.jsonl" for s in (0, 1))
    assert seed0.stat().st_ino == seed1.stat().st_ino  # the same data, linked, not regenerated
    configs = [json.loads((out / f"seed-{s}" / "config.json").read_text()) for s in (0, 1)]
    assert [c["seed"] for c in configs] == [0, 1] and configs[0]["data"] == configs[1]["data"]
    result = json.loads((out / "studies" / "seeds" / "results.json").read_text())
    for comp in result["compositions"].values():
        acc = comp["accuracy"]
        assert len(acc["per_seed"]) == 2 and acc["low"] <= acc["mean"] <= acc["high"]
        assert acc["mean"] == pytest.approx(sum(acc["per_seed"]) / 2)
    red = json.loads((out / "seed-1" / "results.json").read_text())["splits"]["test"]["red"]["accuracy"]
    assert result["compositions"]["red"]["accuracy"]["per_seed"][1] == pytest.approx(red)  # as the pipeline scored it
    assert [(c["a"], c["b"]) for c in result["claims"]] == [
        ("red", "moe"),
        ("red", "global_head"),
        ("red", "uniform"),
        ("moe", "uniform"),
    ]
    for claim in result["claims"]:
        assert claim["verdict"] in ("holds", "reversed", "cannot tell")
        assert all(0.0 <= m["p"] <= 1.0 for m in claim["mcnemar"]) and len(claim["mcnemar"]) == 2
        a_wins = sum(m["p"] < 0.05 and m["only_a"] > m["only_b"] for m in claim["mcnemar"])
        assert claim["seeds_significant"]["a"] == a_wins and sum(claim["seeds_significant"].values()) <= 2
    assert "## The paper's orderings" in printed and (out / "report.html").is_file()


def test_mcnemar_exact_and_the_verdicts():
    import numpy as np

    from redkit_experiments.study.seeds import mcnemar_exact, verdict

    a = np.array([True] * 30 + [False] * 2 + [True] * 68)
    b = np.array([False] * 30 + [True] * 2 + [True] * 68)
    test = mcnemar_exact(a, b)
    assert (test["only_a"], test["only_b"]) == (30, 2) and test["p"] < 1e-5
    assert mcnemar_exact(a, a)["p"] == 1.0
    assert verdict(np.array([0.01, 0.02]), 0.01) == "holds" and verdict(np.array([-0.01, -0.02]), 0.01) == "reversed"
    assert (
        verdict(np.array([0.01, 0.02]), 0.2) == "cannot tell" and verdict(np.array([0.0, 0.0]), None) == "cannot tell"
    )


@pytest.mark.slow
def test_digits_seeds_share_one_split_and_differ_in_training(tmp_path, capsys):
    out = tmp_path / "seeds-digits"
    code, _, err = run_cli(
        ["study", "seeds", "--task", "digits", "--seeds", "2", "--max-epochs", "2", "--out", out], capsys
    )
    assert code == 0, err
    splits = [out / f"seed-{s}" / "splits.json" for s in (0, 1)]
    assert splits[0].read_bytes() == splits[1].read_bytes()  # seed 1 trains on seed 0's split
    configs = [json.loads((out / f"seed-{s}" / "config.json").read_text()) for s in (0, 1)]
    assert [c["seed"] for c in configs] == [0, 1] and {c["data_seed"] for c in configs} == {0}
    weights = [(out / f"seed-{s}" / "modules" / "router" / "model.safetensors").read_bytes() for s in (0, 1)]
    assert weights[0] != weights[1]  # another training seed, other weights
    result = json.loads((out / "studies" / "seeds" / "results.json").read_text())
    assert result["config"]["task"] == "digits" and len(result["claims"]) == 4
