"""The replay-free recipe with tuned owners (`redkit fit --recipe replay-free --owner-experts tuned`,
redkit/fitting/tuned_owners.py): each domain's owner tunes its own top layers and rows on its own data alone, what
the study's `red_tuned` trains (redkit/incremental/tuned.py, one function); the router routes by the ridge from the
owners' statistics of [h, lower]; the run predicts and its bundle serves through every owner's top layers
(redkit/fitting/tuned_encoder.py), with the owners' out-of-scope score; a new domain's owner builds the same modules
along the life cycle's paths and as `redkit federate`'s owners (--owner-experts tuned), whose contributions the server
checks and assembles into the fit run's model, file for file.

On the generated topics set: two domains fitted, the third's val as out-of-scope queries; one epoch, φ 512 wide."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_cli
from safetensors.torch import load_file

from redkit.fitting.topics import write_topics

pytestmark = pytest.mark.slow  # loads the backbone, tunes each owner's top layers, exports the graph

WIDTH = 512  # φ's width here (4,096 by default: --router-option overrides it)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> dict:
    from redkit.cli import main
    from redkit.federated.federate import split_owners

    root = tmp_path_factory.mktemp("tuned_owners")
    data = write_topics(root / "topics", train=180, val=0, test=60, domains=3, labels_per_domain=3)
    owners, test, _ = split_owners(data, root / "fed", 0)
    outside = next(d for d in owners if d.name == "travel")
    two = root / "two"
    two.mkdir()
    for split in ("train", "val"):
        lines = [x for d in owners if d != outside for x in (d / f"{split}.jsonl").read_text().splitlines()]
        (two / f"{split}.jsonl").write_text("".join(f"{x}\n" for x in lines))
    kept = [x for x in test.read_text().splitlines() if json.loads(x)["domain"] != outside.name]
    (two / "test.jsonl").write_text("".join(f"{x}\n" for x in kept))
    flags = ["--recipe", "replay-free", "--owner-experts", "tuned", "--max-epochs", "1"]
    flags += ["--router-option", f"width={WIDTH}", "--oos", str(outside / "val.jsonl")]
    assert main(["fit", "--data", str(two), "--out", str(root / "run"), *flags]) == 0
    assert main(["export", "--run", str(root / "run"), "--out", str(root / "bundle")]) == 0
    # the third domain's owner's modules along the life cycle's paths: add-domain here, train-expert from the bundle
    assert main(["add-domain", "--run", str(root / "run"), "--data", str(outside), "--out", str(root / "added")]) == 0
    expert = ["train-expert", "--bundle", str(root / "bundle"), "--data", str(outside), "--modules-only"]
    assert main([*expert, "--out", str(root / "expert")]) == 0
    plug = ["add-domain", "--run", str(root / "run"), "--expert", str(root / "expert"), "--out", str(root / "plugged")]
    assert main(plug) == 0
    remove = ["remove-domain", "--run", str(root / "added"), "--domain", outside.name, "--out", str(root / "removed")]
    assert main(remove) == 0
    return {name: root / name for name in ("run", "bundle", "added", "expert", "plugged", "removed")} | {
        "root": root,
        "two": two,
        "outside": outside,
    }


def _weights(run: Path, domain: str) -> dict[str, str]:
    from redkit.fitting.tuned_owners import TUNED_PARTS

    parts = ("/".join(part) for part in TUNED_PARTS)
    return {
        part: hashlib.sha256((run / "modules" / part / domain / "model.safetensors").read_bytes()).hexdigest()
        for part in parts
    }


def test_each_owner_tunes_its_own_top_and_the_router_routes_by_the_ridge(tuned):
    config = json.loads((tuned["run"] / "config.json").read_text())
    assert config["owner_experts"] == "tuned" and config["backbone"]["trainable_layers"] == 2
    assert config["router_options"] == {"input": "pooled+lower", "width": WIDTH, "routes_by": "ridge"}
    modules = tuned["run"] / "modules"
    pretrained = load_file(str(modules / "backbone_top" / "model.safetensors"))
    for domain in ("banking", "cooking"):
        top = load_file(str(modules / "experts" / "tuned" / domain / "model.safetensors"))
        assert top.keys() == pretrained.keys() and not all(torch.equal(top[k], pretrained[k]) for k in top)
    assert not (modules / "experts" / "residual").exists()
    results = json.loads((tuned["run"] / "results.json").read_text())
    assert set(results["splits"]["test"]) == {"red", "red_oracle"}  # no composition over h: the features are not h
    test, routing = results["splits"]["test"], results["router"]["test"]["accuracy"]
    assert routing >= 0.9 and test["red"]["accuracy"] >= 0.7  # one epoch from 1/6: the owners' rows are still young
    assert test["red"]["accuracy"] <= test["red_oracle"]["accuracy"] + (1 - routing)
    assert results["oos"]["chosen"]["red"]["score"] in ("density", "ridge", "owners", "msp", "max_alpha", "product")


def test_an_owner_is_what_the_studys_red_tuned_trains_from_the_same_states(tuned):
    """red_tuned (redkit_experiments/incremental/methods/red_tuned.py) calls train_tuned_expert with the fit recipe
    (TUNING), owner_seed(seed, name) and its step's prefix states: given the states the run trained on, the same
    tensors, and the statistics of the same r."""
    from redkit.api import load
    from redkit.backbone import Backbone
    from redkit.features import PrefixStates, cached_features
    from redkit.fitting.owner_data import domain_examples
    from redkit.fitting.recipe import TUNING
    from redkit.incremental.owner import owner_seed
    from redkit.incremental.statistics import ClassStatistics
    from redkit.incremental.tuned import router_input, train_tuned_expert
    from redkit.routers.gaussian import routing_projection
    from redkit.train.loop import TrainConfig

    run = load(tuned["run"]).run
    labels = tuple(run.config.label_rows["cooking"])
    backbone = Backbone(run.config.backbone)
    pretrained = {k: v.clone() for k, v in backbone.top_state_dict().items()}
    states = {}
    for split in ("train", "val"):
        texts, y = domain_examples(run, "cooking", split, labels)
        states[split] = (PrefixStates.build(run.cache_dir, backbone, texts, f"{split}-cooking"), y, texts)
    study_config = TrainConfig(**(TUNING | {"max_epochs": 1}))  # the study's joint_training(), this run's epochs
    assert run.config.train_config("owners") == study_config
    expert = train_tuned_expert(
        backbone,
        pretrained,
        labels,
        states["train"][:2],
        states["val"][:2],
        seed=owner_seed(0, "cooking"),
        config=study_config,
        device=torch.device("cpu"),
    )
    saved = tuned["run"] / "modules"
    top = load_file(str(saved / "experts" / "tuned" / "cooking" / "model.safetensors"))
    assert all(torch.equal(top[k], v) for k, v in expert.top.items())
    rows = load_file(str(saved / "label_rows" / "cooking" / "model.safetensors"))
    assert all(torch.equal(rows[k], v) for k, v in expert.rows.state_dict().items())
    prefix, y, texts = states["train"]
    h = cached_features(run.cache_dir, run.backbone, texts, "train-cooking")
    r = router_input(h, prefix.states, prefix.attention_mask)  # (N, 2d)
    stats = ClassStatistics.of(routing_projection(run)(r), y, labels)
    assert torch.equal(load_file(str(saved / "statistics" / "cooking" / "model.safetensors"))["scatter"], stats.scatter)


def test_the_router_sends_a_query_to_the_owner_of_the_ridges_best_class(tuned):
    from redkit.api import load
    from redkit.compositions import ModuleSet

    run = load(tuned["run"]).run
    router = ModuleSet(run).router()
    h, _, domains = run.split_tensors("test")  # (N, 2d + K d): r first
    assert h.shape[1] == (2 + 2) * run.feature_dim
    ridge = router.ridge_scores(h)  # (N, C)
    routed = router.route(h).weights  # (N, K) one-hot
    assert torch.equal(routed.argmax(-1), router.class_domains[ridge.argmax(-1)])
    assert torch.equal(routed.sum(-1), torch.ones(len(h)))
    assert float((routed.argmax(-1) == domains).float().mean()) >= 0.9


def test_predict_and_the_bundle_answer_as_the_run_evaluates(tuned):
    """FittedRun.predict reads a text through every owner's top layers as the evaluation does; the bundle's ONNX
    graph (no torch) gives the same labels, probabilities within 1e-4 and the same out-of-scope answers."""
    from redkit.api import load
    from redkit.serve.predictor import BundlePredictor

    texts = [json.loads(x)["text"] for x in (tuned["two"] / "test.jsonl").read_text().splitlines()[:12]]
    texts += [json.loads(x)["text"] for x in (tuned["outside"] / "val.jsonl").read_text().splitlines()[:6]]
    run = load(tuned["run"])
    predicted = run.predict(texts)
    served = BundlePredictor.open(tuned["bundle"]).predict(texts)
    assert [p.label for p in predicted] == [s["label"] for s in served]
    assert np.allclose([p.probability for p in predicted], [s["probability"] for s in served], atol=1e-4)
    assert [p.out_of_scope for p in predicted] == [s["out_of_scope"] for s in served]
    assert any(p.out_of_scope for p in predicted[12:])  # the third domain's queries: some called out of scope


def test_the_life_cycle_builds_a_new_owners_modules_the_same_along_every_path(tuned):
    """add-domain --data, train-expert --modules-only from the bundle and add-domain --expert (what `POST /v1/domains`
    installs): the third domain's four modules, the same bytes; the run's own domains copied unchanged; the added run
    routes over three owners and reads a query through three owners' top layers; remove-domain gives the router back."""
    from redkit.api import load

    new = tuned["outside"].name
    built = _weights(tuned["added"], new)
    assert _weights(tuned["expert"], new) == built and _weights(tuned["plugged"], new) == built
    for domain in ("banking", "cooking"):
        assert _weights(tuned["added"], domain) == _weights(tuned["run"], domain)
    added = load(tuned["added"]).run
    assert added.encoder.hidden_size == (2 + 3) * added.feature_dim
    results = json.loads((tuned["added"] / "results.json").read_text())
    assert results["router"]["test"]["accuracy"] >= 0.9 and results["lifecycle"]["frozen_modules_unchanged"]
    # remove-domain takes the third owner out: the router built from the other two's statistics, the same bits
    router = ("modules", "router", "model.safetensors")
    assert (tuned["removed"].joinpath(*router)).read_bytes() == (tuned["run"].joinpath(*router)).read_bytes()


@pytest.fixture(scope="module")
def federated(tuned) -> dict:
    """`redkit federate --owner-experts tuned` over the three domains' owners, split as the fit run's data was, with
    the fit run's settings (one epoch, φ 512 wide): RED alone, in Flower's simulation runtime."""
    from redkit.cli import main

    out = tuned["root"] / "federated"
    flags = ["federate", "--owner-experts", "tuned", "--max-epochs", "1", "--router-option", f"width={WIDTH}"]
    flags += ["--rounds", "0", "--joint-epochs", "0", "--no-one-machine"]
    assert main([*flags, "--data", str(tuned["root"] / "topics"), "--out", str(out)]) == 0
    return {"out": out, "results": json.loads((out / "results.json").read_text())}


def test_federated_tuned_owners_build_the_life_cycles_model_file_for_file(tuned, federated):
    """The model the server assembled from three tuned owners' contributions is, every module file (each owner's top,
    rows, statistics and density; the host; router and gate built from the statistics), the run that `fit` built of
    two domains and add-domain grew by the third; the two answer the same."""
    from redkit.api import load
    from redkit.federated.federate import module_digests

    model = federated["out"] / "model"
    assert federated["results"]["red"]["owner_experts"] == "tuned" and not federated["results"]["red"]["missing"]
    digests = module_digests(model)
    assert len(digests) == 3 * 4 + 4 and digests == module_digests(tuned["added"])
    texts = [json.loads(x)["text"] for x in (federated["out"] / "data" / "test.jsonl").read_text().splitlines()[:12]]
    assert [p.label for p in load(model).predict(texts)] == [p.label for p in load(tuned["added"]).predict(texts)]


def test_the_server_refuses_a_contribution_of_other_experts_or_another_top_in_one_line(federated, tmp_path):
    from safetensors.torch import load, save

    from redkit.errors import RedkitError
    from redkit.federated.assemble import check, contributions_of
    from redkit.federated.upload import MANIFEST, package

    plan, _ = contributions_of(federated["out"] / "model")  # the plan the server checked them against
    received = package(federated["out"] / "accepted" / "cooking")
    manifest = json.loads(received[MANIFEST])
    assert manifest["owner_experts"] == "tuned"
    top = "modules/experts/tuned/cooking/model.safetensors"
    state = load(received[top])
    state.pop(sorted(state)[0])  # one tensor of the top layers missing
    forged = save(state)
    files = manifest["files"] | {top: {"size": len(forged), "sha256": hashlib.sha256(forged).hexdigest()}}
    cases = [
        ({MANIFEST: json.dumps(manifest | {"owner_experts": "residual"}).encode()}, "experts are 'residual'"),
        ({top: forged, MANIFEST: json.dumps(manifest | {"files": files}).encode()}, "not the backbone's top layers"),
    ]
    for change, says in cases:
        with pytest.raises(RedkitError, match=says) as refused:
            check(received | change, plan, "cooking", tmp_path)
        assert len(str(refused.value).splitlines()) == 1 and "owner 'cooking'" in str(refused.value)
    assert not any(tmp_path.iterdir())  # nothing staged
    assert check(received, plan, "cooking", tmp_path).owner == "cooking"  # as sent: accepted


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--owner-experts", "tuned"], "--recipe replay-free"),
        (["--recipe", "replay-free", "--owner-experts", "tuned", "--trainable-layers", "all"], "leave at least one"),
    ],
)
def test_tuned_owners_outside_their_recipe_are_refused_in_one_line(tuned, tmp_path, capsys, flags, says):
    code, _, err = run_cli(["fit", "--data", tuned["two"], "--out", tmp_path / "run", *flags], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and says in err
    assert not Path(tmp_path / "run").exists()


def test_federate_refuses_an_unknown_router_setting_in_one_line_before_writing(tmp_path, capsys):
    flags = ["--owner-experts", "tuned", "--router-option", "widht=512"]
    code, _, err = run_cli(["federate", "--data", tmp_path, "--out", tmp_path / "fed", *flags], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "widht" in err and "width" in err
    assert not (tmp_path / "fed").exists()
