"""The replay-free recipe (`redkit fit --recipe replay-free`, redkit/fitting/replay_free.py), one implementation
behind every path that builds a domain's modules: a domain's residual expert, label rows and routing statistics
are the same bytes (sha256 of their weights) whether `fit` built them, `redkit federate`'s owner, `add-domain
--data`, `train-expert --modules-only` from the run's bundle, or `redkit serve`'s POST /v1/domains; and they are
what the incremental study's `red` computes from the same features (train_owner_share, seeded by the name).

On the generated topics set (3 domains x 3 intents), split into one directory per owner (train and val)."""

import contextlib
import hashlib
import io
import json
from pathlib import Path

import httpx
import pytest
import torch
from conftest import run_cli
from safetensors.torch import load_file

from redkit.fitting.replay_free import DOMAIN_PARTS
from redkit.fitting.topics import write_topics

pytestmark = pytest.mark.slow  # loads the backbone, trains each domain's modules

WEIGHTS = tuple("/".join(part) for part in DOMAIN_PARTS)  # a domain's modules
OWNERS_RULE = {"score": "owners", "threshold": -4.0, "stats": {"density": [0.5, 2.0], "ridge": [0.1, 0.3]}}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _domain_weights(run: Path, domain: str) -> dict[str, str]:
    return {part: _sha(run / "modules" / part / domain / "model.safetensors") for part in WEIGHTS}


def _jsonl(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    """Owners' directories of banking, cooking and travel; `fit --recipe replay-free` on the first two, travel added
    to it with --data, the run's bundle, cooking's expert trained from the bundle with --modules-only and added
    from it; each owner's federated contribution."""
    from redkit.cli import main
    from redkit.federated.federate import split_owners
    from redkit.federated.owner import train_contribution
    from redkit.federated.plan import FederationPlan

    root = tmp_path_factory.mktemp("replay_free_recipe")
    data = write_topics(root / "topics", train=180, val=0, test=60, domains=3, labels_per_domain=3)
    owners, test, _ = split_owners(data, root / "fed", 0)
    last = next(d for d in owners if d.name == "travel")
    first = [d for d in owners if d != last]
    two = root / "two"
    for split in ("train", "val"):
        _jsonl(
            two / f"{split}.jsonl", [line for d in first for line in (d / f"{split}.jsonl").read_text().splitlines()]
        )
    names = {d.name for d in first}
    _jsonl(two / "test.jsonl", [x for x in test.read_text().splitlines() if json.loads(x)["domain"] in names])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        oos = ["--oos", str(last / "val.jsonl")]  # the third domain's queries: out of the two-domain run's scope
        assert main(["fit", "--data", str(two), "--out", str(root / "run"), "--recipe", "replay-free", *oos]) == 0
        # The owners' score as red's OOS rule (CLINC150's val chooses it; these toy domains tie every score), so
        # that the bundle's serving graph, and the one POST /v1/domains rebuilds, compute it.
        rules = json.loads((root / "run" / "oos.json").read_text())
        (root / "run" / "oos.json").write_text(json.dumps(rules | {"red": OWNERS_RULE}))
        plug = ["add-domain", "--run", str(root / "run"), "--data", str(last), "--out", str(root / "added")]
        assert main(plug) == 0
        assert main(["export", "--run", str(root / "run"), "--out", str(root / "bundle")]) == 0
        expert = ["train-expert", "--bundle", str(root / "bundle"), "--data", str(last), "--modules-only"]
        assert main([*expert, "--out", str(root / "experts" / last.name)]) == 0
        plug = ["add-domain", "--run", str(root / "run"), "--expert", str(root / "experts" / last.name)]
        assert main([*plug, "--out", str(root / "plugged")]) == 0
    plan = FederationPlan.of()
    contributions = {
        d.name: train_contribution(plan, d, root / "owners" / d.name, print_fn=lambda *_: None) for d in owners
    }
    return {
        "root": root,
        "owners": owners,
        "last": last.name,
        "contributions": contributions,
        "printed": printed.getvalue(),
    } | {name: root / name for name in ("run", "added", "bundle", "experts", "plugged", "two")}


def test_fit_trains_nothing_on_pooled_data_and_has_no_reference(world):
    config = json.loads((world["run"] / "config.json").read_text())
    assert config["recipe"] == "replay-free" and config["router"] == "gaussian" and config["references"] == []
    rows = config["label_rows"]
    assert sorted(rows) == ["banking", "cooking"] and sorted(sum(rows.values(), [])) == sorted(config["labels"])
    top = json.loads((world["run"] / "modules" / "backbone_top" / "config.json").read_text())
    assert top["metrics"] == {"trained": False}  # the pretrained top, untouched
    assert not (world["run"] / "modules" / "heads").exists()  # the baselines' heads (a global one) pool the data
    results = json.loads((world["run"] / "results.json").read_text())
    scored = results["splits"]["test"]
    assert scored["red"]["accuracy"] >= 0.9 and "joint" not in scored and "moe" not in scored
    assert "base_classifier" not in scored  # C over no label predicts nothing


def test_every_path_builds_a_domains_modules_the_same(world):
    last, contributions = world["last"], world["contributions"]
    for owner in world["owners"]:  # fit's own domains, and the one add-domain trained
        built = world["run"] if owner.name != last else world["added"]
        files = contributions[owner.name]["files"]
        sent = {p: files[f"modules/{p}/{owner.name}/model.safetensors"]["sha256"] for p in WEIGHTS}
        assert _domain_weights(built, owner.name) == sent  # redkit federate's owner
    same = _domain_weights(world["added"], last)
    assert _domain_weights(world["experts"] / last, last) == same  # train-expert --modules-only, from the bundle
    assert _domain_weights(world["plugged"], last) == same  # add-domain --expert: copied
    for domain in ("banking", "cooking"):  # the run's own domains: copied, unchanged, into both
        assert _domain_weights(world["added"], domain) == _domain_weights(world["run"], domain)


def test_the_studys_red_computes_the_same_share_from_the_same_features(world):
    """red (redkit_experiments/incremental/methods/red.py) calls train_owner_share with OWNER_TRAINING, rank d/4,
    the study's φ (width WIDTH, seed 0) and owner_seed(seed, name): given the features the run trained on, the
    same tensors."""
    from redkit.api import load
    from redkit.fitting.replay_free import domain_tensors
    from redkit.incremental.owner import OWNER_TRAINING, owner_seed, train_owner_share
    from redkit.incremental.projection import WIDTH, ProjectionConfig, RandomProjection

    run = load(world["run"]).run
    assert run.config.train_config("experts") == OWNER_TRAINING
    labels = tuple(run.config.label_rows["cooking"])
    train, val = (domain_tensors(run, "cooking", split, labels) for split in ("train", "val"))
    projection = RandomProjection(ProjectionConfig(run.feature_dim, WIDTH))
    share = train_owner_share("cooking", labels, train, val, seed=owner_seed(0, "cooking"), projection=projection)
    saved = {
        part: load_file(str(world["run"] / "modules" / part / "cooking" / "model.safetensors")) for part in WEIGHTS
    }
    for part, module in (("experts/residual", share.expert), ("label_rows", share.rows)):
        assert all(torch.equal(saved[part][k], v) for k, v in module.state_dict().items())
    assert torch.equal(saved["statistics"]["scatter"], share.statistics.scatter)


def test_a_new_domain_that_uses_another_domains_label_is_refused_in_one_line(world, tmp_path, capsys):
    lines = (world["owners"][0] / "train.jsonl").read_text().splitlines()
    moved = [json.dumps(json.loads(x) | {"domain": "bank2"}) for x in lines]
    _jsonl(tmp_path / "bank2" / "train.jsonl", moved)
    argv = ["add-domain", "--run", world["run"], "--data", tmp_path / "bank2", "--out", tmp_path / "out"]
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "brings labels of its own" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("flags", "says"),
    [(["--router", "dense"], "--router gaussian"), (["--references", "joint"], "has none")],
)
def test_a_pooled_part_is_refused_in_one_line(world, tmp_path, capsys, flags, says):
    argv = ["fit", "--data", world["two"], "--out", tmp_path / "run", "--recipe", "replay-free", *flags]
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and says in err
    assert not (tmp_path / "run").exists()


def test_serve_adds_the_domain_whose_owner_sent_its_modules_the_same(world, tmp_path):
    from test_serve import AUTH, server

    from redkit.serve.main import ServeConfig

    config = ServeConfig(
        bundle=str(world["bundle"]),
        run=str(world["run"]),
        admin=True,
        experts_dir=str(world["experts"]),
        work=str(tmp_path / "work"),
    )
    last = world["last"]
    with server(config) as running:
        added = httpx.post(running.url + "/v1/domains", json={"expert": last}, headers=AUTH, timeout=300)
        assert added.status_code == 200, added.text
        assert added.json()["model"]["domains"][-1] == last
        answer = httpx.post(
            running.url + "/v1/predict", json={"texts": ["book a train to Lisbon for Friday"]}, timeout=60
        )
    assert answer.json()["predictions"][0]["label"] == "book"
    # the run the server derived, with every module, and the bundle it serves, without the statistics (the router
    # holds what it routes with): <dir>/modules/experts/residual/<domain>/model.safetensors
    served = sorted(p.parents[4] for p in (tmp_path / "work").rglob(f"residual/{last}/model.safetensors"))
    want = _domain_weights(world["added"], last)
    assert len(served) == 2
    for directory in served:
        got = {
            part: _sha(f)
            for part in WEIGHTS
            if (f := directory / "modules" / part / last / "model.safetensors").is_file()
        }
        assert got == {part: want[part] for part in got} and len(got) >= 2


def test_removing_a_domain_leaves_no_module_trained_on_its_data(world, tmp_path, capsys):
    argv = ["remove-domain", "--run", world["added"], "--domain", world["last"], "--out", tmp_path / "removed"]
    assert run_cli(argv, capsys)[0] == 0
    change = json.loads((tmp_path / "removed" / "results.json").read_text())["lifecycle"]
    assert change["still_trained_on_removed_data"] == [] and change["frozen_modules_unchanged"]
    for domain in ("banking", "cooking"):
        assert _domain_weights(tmp_path / "removed", domain) == _domain_weights(world["run"], domain)


@pytest.mark.parametrize(("stage", "says"), [("base", "trains on pooled data"), ("heads", "trains on pooled data")])
def test_a_pooled_stage_is_refused_on_a_replay_free_run(world, capsys, stage, says):
    code, _, err = run_cli(["train", stage, "--run", world["run"]], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and says in err


def _owner_view(world) -> tuple:
    """The run, its ModuleSet, and (h, α) of its own test queries and of the third domain's (its --oos file)."""
    import torch

    from redkit.api import load
    from redkit.compositions import ModuleSet
    from redkit.features import encode

    run = load(world["run"]).run
    modules = ModuleSet(run)
    views = []
    for texts in ([ex.question for ex in run.splits["test"]], run.oos_texts["oos_val"]):
        h = encode(run.backbone, texts)
        with torch.no_grad():
            views.append((h, modules.router().route(h).probs))
    return run, modules, views


def test_what_the_owners_sent_tells_the_runs_queries_from_another_domains(world):
    """Each owner's density of its adapted features (calibrated on its own val) and the ridge of the summed
    statistics score the run's test queries above the third domain's; the run's OOS rule was chosen on val among
    them (oos.json, with the `owners` sum's standardising statistics where it won)."""
    import torch
    from sklearn.metrics import roc_auc_score

    from redkit.oos.owner_density import OWNER_SCORES, owner_scores

    run, modules, ((h_in, alpha_in), (h_out, alpha_out)) = _owner_view(world)
    with torch.no_grad():
        scores_in, scores_out = owner_scores(modules, h_in, alpha_in), owner_scores(modules, h_out, alpha_out)
        ridge_classes = modules.router().ridge_scores(h_in).argmax(dim=-1)
    for name in OWNER_SCORES:
        auroc = roc_auc_score([1] * len(h_in) + [0] * len(h_out), torch.cat([scores_in[name], scores_out[name]]))
        assert auroc > 0.9, (name, auroc)
    truth = run.split_tensors("test")[2]  # (N,) each query's domain
    assert (modules.router().class_domains[ridge_classes] == truth).float().mean() > 0.9  # its rows in router order
    chosen = json.loads((world["run"] / "results.json").read_text())["oos"]["chosen"]["red"]
    assert chosen["score"] in ("msp", "router", "product", "density", "ridge", "owners")  # chosen among them
    assert chosen["score"] != "owners" or sorted(chosen["stats"]) == ["density", "ridge"]


def test_the_serving_graph_scores_the_owners_evidence_as_the_run_does(world):
    """The bundle's ONNX graph computes red's OOS rule, the `owners` score (no torch at serving): ONNX Runtime's
    answers are the run's, on the run's queries and on the third domain's, and it keeps them apart."""
    import onnxruntime
    import torch

    from redkit.compositions import compose
    from redkit.oos.evaluate import composition_scores

    run, modules, views = _owner_view(world)
    serving = world["bundle"] / "serving"
    assert json.loads((serving / "serving.json").read_text())["oos"]["score"] == "owners"
    session = onnxruntime.InferenceSession(str(serving / "model.onnx"), providers=["CPUExecutionProvider"])
    texts = [ex.question for ex in run.splits["test"][:8]] + run.oos_texts["oos_val"][:8]
    enc = run.backbone.tokenize(texts)
    got = session.run(["oos_score"], {k: enc[k].numpy() for k in ("input_ids", "attention_mask")})[0]
    h = torch.cat([views[0][0][:8], views[1][0][:8]])
    with torch.no_grad():
        composed = compose("red", modules, h, modules.router().route(h).probs.argmax(dim=-1))
        stats = {k: tuple(v) for k, v in OWNERS_RULE["stats"].items()}
        want = composition_scores(composed, h, None, None, stats, modules=modules)["owners"].numpy()
    assert abs(got - want).max() < 1e-3 and got[:8].min() > got[8:].max()
