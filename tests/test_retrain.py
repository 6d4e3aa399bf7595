"""`redkit train STAGE --run RUN`: a module that exists is kept and the one stage line says so and which flag
retrains it; `--retrain` trains it again and puts the new module in place of the old once it is saved,
nothing else moving; an interrupted retraining leaves the old module whole."""

import hashlib
import shutil

import pytest
from conftest import run_cli

from redkit.modules.store import load_module
from redkit.run import open_run
from redkit.train import stages
from redkit.train.stages import on_features

R3 = ("modules", "experts", "residual", "R3")


def _hashes(run):
    return {
        str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((run / "modules").rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def run(tiny_run, tmp_path):
    return shutil.copytree(tiny_run, tmp_path / "run")


def test_an_existing_expert_is_kept_in_one_line_that_names_the_flag(run, capsys):
    before = _hashes(run)
    code, out, err = run_cli(["train", "experts", "--run", run, "--domain", "R3"], capsys)
    assert code == 0, err
    assert out.splitlines() == [
        "[experts] residual/R3: kept (already trained); logit/R3: kept (already trained); --retrain trains again"
    ]
    assert _hashes(run) == before


def test_retrain_replaces_the_expert_and_nothing_else_moves(run, capsys):
    before = _hashes(run)
    inode = run.joinpath(*R3, "model.safetensors").stat().st_ino
    code, out, err = run_cli(["train", "experts", "--run", run, "--domain", "R3", "--retrain"], capsys)
    assert code == 0, err
    (line,) = out.splitlines()
    assert (
        line.startswith("[experts] residual/R3: retrained, 1 epoch, best val loss ") and "logit/R3: retrained" in line
    )
    after = _hashes(run)
    assert after.keys() == before.keys()  # no staging directory or old module left behind
    changed = {path for path in after if after[path] != before[path]}
    # Same seed, same numbers: the weights are the same bytes; only the two configs' recorded seconds differ.
    assert changed <= {f"modules/experts/{kind}/R3/config.json" for kind in ("residual", "logit")}
    assert run.joinpath(*R3, "model.safetensors").stat().st_ino != inode  # a new file put in place of the old


def test_an_interrupted_retraining_leaves_the_old_expert_and_resumes(run, monkeypatch):
    old = run.joinpath(*R3, "model.safetensors").read_bytes()
    save = on_features.save_module

    def killed(path, *args, **kwargs):
        raise KeyboardInterrupt  # the process stopped just before the new module was saved

    monkeypatch.setattr(on_features, "save_module", killed)
    with pytest.raises(KeyboardInterrupt):
        stages.STAGES["experts"](open_run(run), domains=[2], kinds=("residual",), retrain=True)
    assert run.joinpath(*R3, "model.safetensors").read_bytes() == old
    load_module(run.joinpath(*R3))  # whole and loadable
    monkeypatch.setattr(on_features, "save_module", save)
    outcome = stages.STAGES["experts"](open_run(run), domains=[2], kinds=("residual",), retrain=True)
    assert outcome["residual/R3"]["retrained"] is True
    assert run.joinpath(*R3, "model.safetensors").read_bytes() == old  # same seed, same numbers
    assert not any(p.name.startswith(".") for p in (run / "modules").rglob("*"))


def test_retrain_is_refused_for_stage_base_in_one_line(run, capsys):
    before = _hashes(run)
    code, _, err = run_cli(["train", "base", "--run", run, "--retrain"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "cannot be retrained in place" in err
    assert _hashes(run) == before


def test_retrain_router_only_when_asked(run, capsys):
    before = _hashes(run)
    code, out, _ = run_cli(["train", "router", "--run", run], capsys)
    assert code == 0 and out.splitlines() == ["[router] kept (already trained); --retrain trains again"]
    code, out, _ = run_cli(["train", "router", "--run", run, "--retrain"], capsys)
    assert code == 0 and out.startswith("[router] retrained, 1 epoch")
    after = _hashes(run)
    assert {p for p in after if after[p] != before[p]} == {"modules/router/config.json"}
