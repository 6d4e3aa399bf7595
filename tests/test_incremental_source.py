"""source.py: a method's recorded source covers what it runs and nothing another method runs alone."""

import shutil

from redkit_experiments.incremental import source
from redkit_experiments.incremental.methods import METHODS


def _closure(name: str) -> set[str]:
    return set(source.import_closure((*source.STUDY, METHODS[name].__module__)))


def test_a_method_depends_on_what_it_imports_and_the_study_not_on_other_methods():
    red, ewc = _closure("red"), _closure("ewc")
    assert {"redkit.incremental.owner", "redkit.red.model"} <= red and "redkit.incremental.owner" not in ewc
    # ewc trains through finetune.py and redkit's loop; the study's scoring shapes both
    assert {"redkit_experiments.incremental.methods.finetune", "redkit.train.loop"} <= ewc
    assert {"redkit_experiments.incremental.study", "redkit_experiments.incremental.data"} <= red & ewc
    # the report writes what was measured, and the registry would pull in every method
    assert "redkit_experiments.incremental.report" not in red | ewc
    assert "redkit_experiments.incremental.methods.klda" not in red | ewc


def test_an_edit_changes_the_source_of_the_methods_that_run_it_only(tmp_path, monkeypatch):
    for package in source.PACKAGES:
        shutil.copytree(source.ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(source, "ROOT", tmp_path)
    red, replay = (METHODS[n].__module__ for n in ("red", "er_1000"))
    before = {m: source.method_source(m) for m in (red, replay)}
    owner = tmp_path / "redkit/incremental/owner.py"
    owner.write_text(owner.read_text() + "\n# an edit\n")
    assert source.method_source(red) != before[red] and source.method_source(replay) == before[replay]
    loop = tmp_path / "redkit/train/loop.py"  # the study's own code: every method's figures
    loop.write_text(loop.read_text() + "\n# an edit\n")
    assert source.method_source(replay) != before[replay]
