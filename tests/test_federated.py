"""Owners who never share their data (redkit/federated): each owner's contribution from its own data alone, the
server's checks (another backbone, a wrong sha256, a name that is a path, too large: refused in one line, nothing
written, the others assembled), and the whole app in Flower's simulation runtime: the model assembled over Flower
has the same module files (sha256) as the one-machine recipe, and is a fit run eval, export and predict read."""

import json
import os
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from redkit.errors import RedkitError  # noqa: E402
from redkit.federated.assemble import accepted_in, assemble, check  # noqa: E402
from redkit.federated.owner import MANIFEST, train_contribution  # noqa: E402
from redkit.federated.plan import FederationPlan  # noqa: E402
from redkit.federated.upload import package  # noqa: E402
from redkit.fitting.topics import write_topics  # noqa: E402

pytestmark = pytest.mark.slow  # loads the backbone, trains owners' modules


@pytest.fixture(scope="module")
def owners(tmp_path_factory) -> dict:
    """Three owners of one topics domain each, their contributions trained, and the plan."""
    from redkit.federated.federate import split_owners

    root = tmp_path_factory.mktemp("federated")
    data = write_topics(root / "topics", train=180, val=0, test=60, domains=3, labels_per_domain=3)
    directories, test, labels = split_owners(data, root / "fed", 0)
    plan = FederationPlan.of()
    work = {d.name: root / "work" / d.name for d in directories}
    manifests = {d.name: train_contribution(plan, d, work[d.name], print_fn=lambda *_: None) for d in directories}
    return {
        "root": root,
        "data": data,
        "dirs": directories,
        "test": test,
        "plan": plan,
        "work": work,
        "manifests": manifests,
        "labels": labels,
    }


def _received(owners, name) -> dict[str, bytes]:
    return package(owners["work"][name], owners["manifests"][name])


def test_a_contribution_carries_module_files_and_no_example(owners):
    name = owners["dirs"][0].name
    received = _received(owners, name)
    assert all(rel == MANIFEST or rel.startswith("modules/") for rel in received)
    assert {Path(rel).parts[1] for rel in received if rel != MANIFEST} == {"experts", "label_rows", "statistics"}
    texts = [json.loads(line)["text"] for line in (owners["dirs"][0] / "train.jsonl").read_text().splitlines()]
    blob = b"".join(received.values())
    assert not any(t.encode() in blob for t in texts)  # no training text travels


def test_the_same_data_gives_the_same_contribution(owners, tmp_path):
    d = owners["dirs"][1]
    again = train_contribution(owners["plan"], d, tmp_path / "again", print_fn=lambda *_: None)
    weights = {
        rel: e["sha256"] for rel, e in owners["manifests"][d.name]["files"].items() if rel.endswith("safetensors")
    }
    assert len(weights) == 3 and all(again["files"][rel]["sha256"] == sha for rel, sha in weights.items())


def _tampered(owners, name, how):
    received = dict(_received(owners, name))
    manifest = json.loads(received[MANIFEST])
    if how == "backbone":
        manifest["fingerprint"] = "0" * 16
    elif how == "sha256":
        weights = next(rel for rel in received if rel.endswith("model.safetensors"))
        received[weights] = received[weights][:-1] + bytes([received[weights][-1] ^ 1])
    elif how == "path":
        rel = next(rel for rel in received if rel.endswith("config.json"))
        received["../../escape/config.json"] = received.pop(rel)
        manifest["files"]["../../escape/config.json"] = manifest["files"].pop(rel)
    received[MANIFEST] = json.dumps(manifest).encode()
    return received


@pytest.mark.parametrize(
    ("how", "says"),
    [("backbone", "trained on backbone 0000"), ("sha256", "does not have the sha256"), ("path", "leaves")],
)
def test_a_bad_contribution_is_refused_in_one_line_and_nothing_is_written(owners, tmp_path, how, says):
    name = owners["dirs"][0].name
    with pytest.raises(RedkitError) as err:
        check(_tampered(owners, name, how), owners["plan"], name, tmp_path)
    assert says in str(err.value) and "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == [] and not (tmp_path.parent / "escape").exists()


def test_a_contribution_over_the_limit_is_refused_and_the_others_assembled(owners, tmp_path):
    names = [d.name for d in owners["dirs"]]
    with pytest.raises(RedkitError, match="over the limit"):
        check(_received(owners, names[0]), owners["plan"], names[0], tmp_path / "accepted", limit=1000)
    (tmp_path / "accepted").mkdir(exist_ok=True)
    for name in names[1:]:
        check(_received(owners, name), owners["plan"], name, tmp_path / "accepted")
    run = assemble(owners["plan"], accepted_in(tmp_path / "accepted"), tmp_path / "model", print_fn=lambda *_: None)
    assert run.space.domains == tuple(sorted(names[1:]))


def test_over_flower_the_same_modules_as_on_one_machine_and_a_run_the_cli_reads(owners, capsys):
    from redkit.cli import main

    out = owners["root"] / "run"
    assert (
        main(["federate", "--data", str(owners["data"]), "--out", str(out), "--rounds", "1", "--joint-epochs", "1"])
        == 0
    )
    results = json.loads((out / "results.json").read_text())
    assert results["same_modules"] is True and results["modules_compared"] == 13
    assert abs(results["red"]["accuracy"] - results["one_machine"]["accuracy"]) <= 1e-4
    assert results["red"]["accuracy"] >= 0.9 and not results["red"]["missing"] and not results["red"]["refused"]
    assert set(results) >= {"red", "one_machine", "same_modules", "fedavg", "joint_central"}
    round_ = results["fedavg"][0]
    assert round_["round"] == 1 and round_["bytes_up"] > 0 and round_["bytes_down"] > 0 and 0 <= round_["accuracy"] <= 1
    assert results["red"]["bytes_up"] > 0 and results["red"]["bytes_down"] > 0
    capsys.readouterr()
    assert main(["eval", "--run", str(out / "model"), "--data", str(owners["test"]), "--composition", "red"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("red "))
    assert abs(float(line.split()[1]) - results["red"]["accuracy"]) < 1e-9
    assert main(["predict", "--bundle", str(out / "bundle"), "how do I cancel my flight"]) == 0
    assert "cancel" in capsys.readouterr().out


def test_the_central_joint_trains_every_epoch_and_keeps_the_best_by_the_pooled_val(owners, tmp_path):
    """Not the first epoch of a longer schedule (a constant validation figure once kept epoch 1 of 3)."""
    from redkit.federated.federate import joint_central

    result = joint_central(owners["labels"], owners["dirs"], owners["test"], epochs=2, seed=0, cache=tmp_path)
    history = result["val_by_epoch"]
    assert result["epochs"] == 2 and len(history) == 2 and result["val_examples"] > 0
    best = max(range(2), key=lambda e: (history[e]["accuracy"], -history[e]["loss"]))
    assert result["best_epoch"] == best + 1 and result["val_accuracy"] == history[best]["accuracy"]
    assert len({h["loss"] for h in history}) == 2  # a validation figure that moves: the epochs are compared


TOKEN = "test-admin-token-0123456789"
AUTH = {"authorization": f"Bearer {TOKEN}"}
TAR = {**AUTH, "content-type": "application/x-tar"}


def _accept_everyone(owners, accepted: Path) -> dict:
    accepted.mkdir(parents=True)
    for d in owners["dirs"]:
        check(_received(owners, d.name), owners["plan"], d.name, accepted)
    return {a.owner: a for a in accepted_in(accepted)}


def test_an_owner_joins_and_opts_out_while_the_model_serves(owners, tmp_path):
    """A running `redkit serve --run` of two owners' model: a third owner's upload is checked as the federation's
    server checks it (a wrong sha256, a path, not a tar, no token, over the upload limit: refused, nothing
    written), then swapped in: the same modules as the three owners assembled at once; its opt-out (DELETE)
    gives the two owners' model back, module for module."""
    pytest.importorskip("onnxruntime")
    httpx = pytest.importorskip("httpx")
    from redkit.federated.federate import module_digests, push_accepted
    from redkit.federated.upload import pack
    from redkit.serve.main import TOKEN_ENV, ServeConfig, bundle_of_run, create
    from redkit.serve.testing import ServerThread

    quiet, plan = (lambda *_: None), owners["plan"]
    names = [d.name for d in owners["dirs"]]
    everyone = _accept_everyone(owners, tmp_path / "accepted")
    assemble(plan, [everyone[n] for n in names[:2]], tmp_path / "two", quiet)
    assemble(plan, list(everyone.values()), tmp_path / "three", quiet)
    work, joiner = tmp_path / "serve", names[2]
    genuine = pack(_received(owners, joiner))
    config = ServeConfig(
        bundle=str(bundle_of_run(tmp_path / "two", work, quiet)),
        run=str(tmp_path / "two"),
        admin=True,
        work=str(work),
        max_upload_bytes=len(genuine) + 4096,
    )
    os.environ[TOKEN_ENV] = TOKEN
    with ServerThread(create(config), start_timeout_s=30) as running:
        url = running.url
        deadline = time.monotonic() + 60
        while httpx.get(url + "/health").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)

        def upload(body: bytes, headers=TAR) -> httpx.Response:
            return httpx.post(url + "/v1/domains", params={"owner": joiner}, content=body, headers=headers, timeout=60)

        assert upload(genuine, {"content-type": "application/x-tar"}).status_code == 401
        for how, says in (("sha256", "does not have the sha256"), ("path", "leaves")):
            refused = upload(pack(_tampered(owners, joiner, how)))
            message = refused.json()["error"]["message"]
            assert refused.status_code == 422 and says in message and "\n" not in message, refused.text
        assert "not a tar archive" in upload(b"x" * 600).json()["error"]["message"]
        too_large = pack(_received(owners, joiner) | {"padding": b"\0" * 8192})
        assert upload(too_large).status_code == 413
        assert not any((work / "received").iterdir())  # nothing of a refused upload was kept
        assert httpx.get(url + "/v1/info").json()["version"] == 1

        assert push_accepted(url, TOKEN, tmp_path / "accepted", [joiner], quiet) == {joiner: 2}
        assert httpx.get(url + "/v1/info").json()["domains"] == sorted(names)
        (joined,) = work.glob("v2-*/run")
        assert module_digests(joined) == module_digests(tmp_path / "three")

        left = httpx.delete(f"{url}/v1/domains/{joiner}", headers=AUTH, timeout=60)
        assert left.status_code == 200 and left.json()["model"]["domains"] == sorted(names[:2]), left.text
        (after,) = work.glob("v3-*/run")
        assert module_digests(after) == module_digests(tmp_path / "two")


def test_the_deployment_runtime_goes_on_without_a_killed_owner_who_joins_later(owners, tmp_path):
    """A SuperLink and three SuperNodes as processes; one owner's SuperNode (and its ClientApp) killed with
    SIGKILL while it trains: the round ends with the other two and names the missing owner. That owner comes
    back alone later (the others offline): the same run trains it only, keeps the others' contributions, and
    the model is the one-machine model of all three (sha256)."""
    from redkit.federated.deployment import run_deployment
    from redkit.federated.federate import module_digests
    from redkit.federated.flower_app import Settings

    quiet, plan = (lambda *_: None), owners["plan"]
    names = [d.name for d in owners["dirs"]]
    victim, run, owner_work = names[1], tmp_path / "run", tmp_path / "owners"
    settings = Settings(plan.to_json(), str(run), owners=3, rounds=0, owner_work=str(owner_work), timeout=600)
    killed = {}

    def kill_while_it_trains(federation) -> None:
        deadline = time.monotonic() + 300
        while not (owner_work / victim).exists():  # its ClientApp has begun its contribution
            if time.monotonic() > deadline:
                return
            time.sleep(0.1)
        time.sleep(1.0)
        supernode = federation.processes[f"supernode-{victim}"]
        os.killpg(supernode.pid, signal.SIGKILL)
        killed["code"] = supernode.wait()

    run_deployment(settings, owners["dirs"], tmp_path / "deployment", quiet, watch=kill_while_it_trains)
    first = json.loads((run / "federation" / "server.json").read_text())["red"]
    assert killed["code"] == -signal.SIGKILL
    assert set(first["missing"]) == {victim} and first["domains"] == sorted(set(names) - {victim}), first
    assert not (run / "accepted" / victim).exists()

    alone = [d for d in owners["dirs"] if d.name == victim]
    run_deployment(replace(settings, owners=1), alone, tmp_path / "deployment", quiet)
    second = json.loads((run / "federation" / "server.json").read_text())["red"]
    assert second["sent_now"] == [victim] and second["domains"] == sorted(names) and not second["missing"]
    _accept_everyone(owners, tmp_path / "one" / "accepted")
    assemble(plan, accepted_in(tmp_path / "one" / "accepted"), tmp_path / "one" / "model", quiet)
    assert module_digests(run / "model") == module_digests(tmp_path / "one" / "model")
