"""scripts/federated_baselines.py's record: a finished setting's summary, kept in the repository, is read where the
run directory is gone, and a record that names another setting or seed is refused in one line."""

from argparse import Namespace

import pytest
from conftest import load_script

pytest.importorskip("flwr")


def test_a_recorded_setting_is_read_where_its_run_is_gone_and_a_mislabelled_one_refused(tmp_path):
    from redkit.atomic import write_json
    from redkit.errors import RedkitError
    from redkit.federated.strategies import IterativeConfig

    script = load_script("federated_baselines")
    config = IterativeConfig("fedprox", lr=5e-4, local_epochs=3, proximal_mu=0.01, patience=3)
    args = Namespace(out=tmp_path / "runs", record=tmp_path / "record")
    assert script.finished(args, config, 0) is None  # neither a run nor a record: to be run
    summary = {"setting": config.label(), "seed": 0, "val_accuracy": 0.5, "by_round": []}
    write_json(args.record / f"{script.name_of(config, 0)}.json", summary)
    assert script.finished(args, config, 0) == summary
    assert script.finished(args, config, 1) is None  # another seed is another setting
    write_json(args.record / f"{script.name_of(config, 1)}.json", summary)  # seed 0's figures under seed 1's name
    with pytest.raises(RedkitError, match="seed 0, not 'fedprox lr 0.0005 E 3 mu 0.01', seed 1") as refused:
        script.finished(args, config, 1)
    assert "\n" not in str(refused.value)
