"""`redkit reproduce peers`: LoRA experts inside the backbone (peft's format, trained alone through
the frozen classifier), compositions that mean what they say (RED's mixing with a one-hot α is
peft's per-example selection; the recorded Arrow routing reproduces Arrow's layer output), the one
table, and bad input as one line with exit code 2."""

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("peft")

from conftest import run_cli  # noqa: E402

from redkit.compositions import ModuleSet  # noqa: E402
from redkit_experiments.arithmetic.run import TaskRun as Run  # noqa: E402
from redkit_experiments.peers.arrow import ArrowSettings, arrow_coefficients  # noqa: E402
from redkit_experiments.peers.benchmark import SplitStates  # noqa: E402
from redkit_experiments.peers.compositions import LoraExperts, MergeSettings, lora_compose  # noqa: E402
from redkit_experiments.peers.lora import LoraBackbone  # noqa: E402

TINY = ("--examples-per-expert", "32", "--val-per-expert", "16", "--lora-epochs", "2", "--xlora-examples", "50")
LORA = ["lora_oracle", "lora_red", "lora_uniform", "lora_merge_linear", "lora_merge_ties", "lora_arrow", "lora_xlora"]


@pytest.fixture(scope="module")
def peers_run(tiny_run, tmp_path_factory):
    """A copy of the session's tiny task1 run with `reproduce peers` run on it (tiny caps)."""
    run = tmp_path_factory.mktemp("peers") / "run"
    shutil.copytree(tiny_run, run)
    from redkit.cli import main

    assert main(["reproduce", "peers", "--out", str(run), *TINY]) == 0
    return run


@pytest.fixture(scope="module")
def experts(peers_run):
    run = Run(peers_run)
    lb = LoraBackbone(run)
    directories = [peers_run / "peers" / "lora" / name for name in run.space.domains]
    for name, directory in zip(run.space.domains, directories):
        lb.load(directory, name)
    return LoraExperts(run, lb, directories, ModuleSet(run), ArrowSettings(), MergeSettings())


def _batch(experts: LoraExperts, count: int = 24):
    data = SplitStates(experts.run, experts.main, "test")
    idx = data.order[:count]
    return data.states.batch(idx, torch.device("cpu")), data.h[idx], data.labels[idx]


def test_one_table_with_every_composition_and_the_run_left_alone(peers_run, tiny_run):
    results = json.loads((peers_run / "peers" / "results.json").read_text())
    assert list(results["rows"]) == ["red", "moe", "global_head", "oracle", *LORA]
    for name, row in results["rows"].items():
        assert 0.0 <= row["accuracy"] <= row["range_accuracy"] <= 1.0  # a right answer lies in the right range
        assert row["latency_ms_per_example"] > 0 and row["parameters_per_expert"] > 0
        assert (row["routing_accuracy"] is not None) == (
            name in ("red", "moe", "lora_red", "lora_arrow", "lora_xlora")
        ), name
    rows = results["rows"]
    assert rows["lora_red"]["routing_accuracy"] == pytest.approx(rows["red"]["routing_accuracy"])  # the same router
    d = 384
    assert rows["lora_oracle"]["parameters_per_expert"] == 2 * (
        4 * 2 * 8 * d + 2 * 8 * (d + 4 * d)
    )  # rank 8, 12 Linears
    assert results["prefix_path_max_abs_diff"] < 1e-4  # the cached-prefix path computes the run's pooled features
    report = (peers_run / "peers" / "report.md").read_text()
    assert "| Composition | Accuracy | Range acc | Routing acc" in report and "X-LoRA" in report
    for path in (tiny_run / "modules").rglob("*"):
        if path.is_file():
            assert path.read_bytes() == (peers_run / path.relative_to(tiny_run)).read_bytes()


def test_each_expert_is_a_peft_adapter_trained_alone_on_its_domain(peers_run):
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModel

    from redkit.backbone.locate import default_backbone_path

    results = json.loads((peers_run / "peers" / "results.json").read_text())
    directory = peers_run / "peers" / "lora" / "R3"
    model = PeftModel.from_pretrained(
        AutoModel.from_pretrained(default_backbone_path()), str(directory), adapter_name="R3"
    )
    saved = load_file(str(directory / "adapter_model.safetensors"))
    loaded = {k: v for k, v in model.state_dict().items() if ".lora_" in k}
    assert len(saved) == len(loaded) == 24  # A and B of 12 Linear modules
    b = [v for k, v in saved.items() if "lora_B" in k]
    assert all(torch.equal(v, loaded[k.replace(".weight", ".R3.weight")]) for k, v in saved.items())
    assert any(v.abs().sum() > 0 for v in b)  # B starts at zero: it trained
    assert {int(k.split(".layer.")[1].split(".")[0]) for k in saved} == {4, 5}  # the top 2 of 6 layers only
    meta = json.loads((directory / "redkit.json").read_text())
    assert meta["kind"] == "lora" and meta["domain"] == 2 and meta["metrics"]["examples"] <= 32
    assert meta["backbone_fingerprint"] == Run(peers_run).fingerprint
    assert (
        results["experts"]["R3"]["metrics"]["trainable_parameters"]
        == results["rows"]["lora_red"]["parameters_per_expert"]
    )


def test_an_expert_trains_alone_from_the_prefix_cache(peers_run, tmp_path):
    from redkit.train.loop import TrainConfig
    from redkit_experiments.peers.lora import LoraExpertConfig
    from redkit_experiments.peers.train import train_lora_expert

    run_dir = tmp_path / "run"
    shutil.copytree(peers_run, run_dir)
    run = Run(run_dir)
    lb = LoraBackbone(run)
    for name in run.space.domains[1:]:
        lb.load(run_dir / "peers" / "lora" / name, name)
    others = {k: v.clone() for k, v in lb.peft.state_dict().items() if ".lora_" in k}
    classifier = ModuleSet(run).classifier()
    before = {k: v.clone() for k, v in classifier.state_dict().items()}
    calls = []
    lb.backbone.layers[0].register_forward_hook(lambda *a: calls.append(1))
    config = LoraExpertConfig(examples=32, val_examples=16, train=TrainConfig(lr=1e-2, batch_size=16, max_epochs=1))
    meta = train_lora_expert(run, lb, classifier, 0, tmp_path / "lora", config)
    assert calls == []  # the lower layers never ran: the expert's texts' prefix states were cached
    assert meta.metrics["epochs"] == 1 and meta.domain == 0
    after = lb.peft.state_dict()
    assert all(torch.equal(v, after[k]) for k, v in others.items())  # the other experts did not move
    assert all(torch.equal(v, classifier.state_dict()[k]) for k, v in before.items())  # nor did C
    assert any(".R1." in k and "lora_B" in k and after[k].abs().sum() > 0 for k in after)  # R1 did


def test_red_mixing_with_a_one_hot_alpha_is_peft_selecting_the_adapter(experts):
    batch, h, labels = _batch(experts)
    oracle = lora_compose("lora_oracle", experts, batch, h, labels).probs
    from redkit_experiments.peers.mixing import mixed_experts

    alpha = torch.nn.functional.one_hot(labels, len(experts.names)).float()
    with torch.no_grad(), mixed_experts(experts.main.peft, experts.names, alpha):
        mixed = experts.probs(experts.main.features(batch))
    assert torch.allclose(mixed, oracle, atol=1e-5)
    uniform = lora_compose("lora_uniform", experts, batch, h, labels).probs
    assert not torch.allclose(uniform, oracle, atol=1e-5)  # the experts differ, so mixing them matters


def test_recorded_arrow_routing_reproduces_the_arrow_layer(experts):
    batch, h, labels = _batch(experts, 8)
    lb, routing = experts.arrow()
    seen = {}
    layer = routing.layers[0]
    handle = layer.register_forward_hook(lambda m, args, out: seen.update(x=args[0], y=out))
    try:
        composed = lora_compose("lora_arrow", experts, batch, h, labels)
    finally:
        handle.remove()
    x = seen["x"]
    coeff = arrow_coefficients(layer, x)  # (B, T, E)
    with torch.no_grad():
        updates = torch.stack(
            [
                layer.lora_B[n](layer.lora_A[n](x)) * layer.scaling[n]
                for n in layer.lora_arrow["arrow_router"].task_adapter_names
            ],
            dim=2,
        )  # (B, T, E, out)
        expected = layer.base_layer(x) + (coeff.unsqueeze(-1) * updates).sum(dim=2)
    assert torch.allclose(seen["y"], expected, atol=1e-5)
    assert composed.weights.shape == (8, 5) and torch.allclose(composed.weights.sum(dim=-1), torch.ones(8), atol=1e-5)
    assert (coeff > 0).sum(dim=-1).max() <= 3  # top-k = 3 of 5


def test_peft_create_arrow_model_outcome_is_recorded(peers_run):
    arrow = json.loads((peers_run / "peers" / "results.json").read_text())["arrow_as_is"]
    assert arrow["expert_layers"] == 12  # the top 2 layers' Linear modules
    # it runs exactly when its router lands only where the experts are (peft matches their last names only)
    assert arrow["loads"] == (arrow["router_layers"] == arrow["expert_layers"]), arrow
    assert arrow["loads"] or "non-empty TensorList" in arrow["error"]


def test_xlora_loads_wrapped_and_its_classifier_is_trained_and_saved(peers_run):
    xlora = json.loads((peers_run / "peers" / "results.json").read_text())["xlora"]
    assert xlora["as_is"]["loads"] or "unexpected keys" in xlora["as_is"]["error"]  # peft issue #2132
    assert xlora["wrapped"]["loads"], xlora  # with a `.model` level and adapters "0".."K-1" it runs
    classifier = xlora["wrapped"]["classifier"]
    assert classifier["examples"] == 50 and classifier["trainable_parameters"] == 384 * 5 + 5  # h -> K scalings
    meta = json.loads((peers_run / "peers" / "xlora" / "config.json").read_text())
    assert meta["kind"] == "xlora_classifier" and (peers_run / "peers" / "xlora" / "model.safetensors").is_file()


def test_a_rerun_reuses_the_experts(peers_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(peers_run, run)
    before = (run / "peers" / "lora" / "R1" / "adapter_model.safetensors").read_bytes()
    code, out, err = run_cli(["reproduce", "peers", "--out", run, *TINY, "--no-xlora"], capsys)
    assert code == 0, err
    assert "R1: reusing" in out and (run / "peers" / "lora" / "R1" / "adapter_model.safetensors").read_bytes() == before
    first = json.loads((peers_run / "peers" / "results.json").read_text())["rows"]
    again = json.loads((run / "peers" / "results.json").read_text())["rows"]
    assert list(again) == [n for n in first if n != "lora_xlora"]  # --no-xlora: no X-LoRA row
    for name, row in again.items():  # same experts, same seed: the same numbers (Arrow's power iteration is seeded)
        assert (row["accuracy"], row["routing_accuracy"]) == (
            first[name]["accuracy"],
            first[name]["routing_accuracy"],
        ), name


def _one_line(code: int, err: str, message: str) -> None:
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_experts_of_mixed_ranks_are_one_line_and_exit_code_2(peers_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(peers_run, run)
    shutil.rmtree(run / "peers" / "lora" / "R2")  # retrained alone, at another rank
    code, _, err = run_cli(["reproduce", "peers", "--out", run, *TINY, "--lora-rank", "4"], capsys)
    _one_line(
        code, err, "LoRA expert R2 has rank 4 but R1 rank 8: lora_arrow and lora_merge_* need experts of one rank"
    )


def test_experts_of_other_target_modules_are_one_line_and_exit_code_2(peers_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(peers_run, run)
    shutil.rmtree(run / "peers" / "lora" / "R5")
    code, _, err = run_cli(["reproduce", "peers", "--out", run, *TINY, "--lora-targets", "query,value"], capsys)
    _one_line(code, err, "LoRA expert R5 adapts other modules than R1 (4 vs 12 target modules)")


def test_an_adapter_from_another_backbone_is_one_line_and_exit_code_2(peers_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(peers_run, run)
    meta_path = run / "peers" / "lora" / "R4" / "redkit.json"
    meta = json.loads(meta_path.read_text())
    meta["backbone_fingerprint"] = "0123456789abcdef"  # as if trained on another (tuned) backbone
    meta_path.write_text(json.dumps(meta))
    code, _, err = run_cli(["reproduce", "peers", "--out", run, *TINY], capsys)
    _one_line(code, err, "this lora module was trained on backbone 0123456789abcdef")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--lora-targets", "nowhere"], "--lora-targets nowhere: no Linear module of the top layers has such a name"),
        (["--lora-rank", "0"], "--lora-rank must be at least 1"),
        (["--eval-split", "dev"], "--eval-split dev: this run has no such split"),
    ],
)
def test_bad_flags_are_one_line_and_exit_code_2(peers_run, tmp_path, capsys, argv, message):
    run = tmp_path / "run"
    shutil.copytree(peers_run, run)
    if "--lora-targets" in argv:
        shutil.rmtree(run / "peers" / "lora" / "R1")
    code, _, err = run_cli(["reproduce", "peers", "--out", run, *TINY, *argv], capsys)
    _one_line(code, err, message)


def test_a_run_of_the_other_task_is_one_line_and_exit_code_2(peers_run, capsys):
    code, _, err = run_cli(["reproduce", "peers", "--task", "task2", "--out", peers_run], capsys)
    _one_line(code, err, "is a task1 run, not task2")


def test_without_peft_the_command_says_how_to_get_it(tiny_run, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)  # `import peft` raises ImportError
    code, _, err = run_cli(["reproduce", "peers", "--out", tiny_run], capsys)
    _one_line(code, err, "pip install 'redkit[peft]'")


def test_only_the_peers_package_imports_peft():
    root = Path(__file__).resolve().parent.parent / "redkit"
    offenders = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if p.parent.name != "peers" and re.search(r"^\s*(import peft|from peft)", p.read_text(), re.MULTILINE)
    ]
    assert offenders == []


def test_a_missing_run_is_made_with_the_config_reproduce_would_use(tmp_path, monkeypatch):
    """`reproduce peers` on a directory with no results.json makes the run first: its config must be
    the one `reproduce task1` builds from the same flags (the router option included)."""
    import redkit_experiments.peers.benchmark as benchmark
    from redkit.cli import main

    made = {}

    def capture(out, task, make_config):
        made["config"] = make_config()
        raise SystemExit(0)

    monkeypatch.setattr(benchmark, "finished_run", capture)
    with pytest.raises(SystemExit):
        main(["reproduce", "peers", "--out", str(tmp_path / "new"), "--router", "switch", "--seed", "3"])
    assert made["config"].router == "switch" and made["config"].seed == 3 and made["config"].task == "task1"
