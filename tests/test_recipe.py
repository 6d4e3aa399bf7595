"""The fine-tuning recipe of a fit run: the learning-rate schedule, length-grouped batches, the best
epoch by val accuracy, every layer tunable, and what `auto` settles from the training texts."""

import json

import pytest
import torch
from torch import nn

from redkit.fitting.recipe import MAX_EPOCHS, MIN_EPOCHS, TOKEN_BUDGET, covering_length, settle
from redkit.train.loop import MEGABATCH, TrainConfig, epoch_batches, fit, lr_factor


def test_linear_schedule_is_transformers_warmup_then_decay():
    from transformers import get_linear_schedule_with_warmup

    model = nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    reference = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=10, num_training_steps=100)
    for step in range(100):
        assert lr_factor(step, 100, 10, "linear") == pytest.approx(optimizer.param_groups[0]["lr"])
        optimizer.step()
        reference.step()
    assert lr_factor(50, 100, 10, "constant") == 1.0


def test_length_grouped_batches_cover_every_example_once_and_pad_less():
    torch.manual_seed(0)
    lengths = torch.randint(2, 60, (1000,))
    order = torch.randperm(1000)
    grouped = epoch_batches(order, 16, lengths)
    plain = epoch_batches(order, 16)
    assert len(grouped) == len(plain) == 63
    assert sorted(torch.cat(grouped).tolist()) == list(range(1000))
    padded = lambda batches: sum(len(b) * int(lengths[b].max()) for b in batches)  # noqa: E731
    assert padded(grouped) < 0.7 * padded(plain)
    # batches come from runs of MEGABATCH batches: a batch never mixes two runs
    runs = {int(i): r for r, chunk in enumerate(order.split(16 * MEGABATCH)) for i in chunk}
    assert all(len({runs[int(i)] for i in b}) == 1 for b in grouped)


def _toy_fit(select_by: str) -> tuple:
    """A model whose val loss keeps falling while its val accuracy peaks at epoch 2 (scripted)."""
    model = nn.Linear(1, 1)
    scripted = iter(
        [
            {"loss": 3.0, "accuracy": 0.5},
            {"loss": 2.0, "accuracy": 0.9},
            {"loss": 1.0, "accuracy": 0.8},
            {"loss": 0.5, "accuracy": 0.7},
        ]
    )
    seen = []

    def validate():
        seen.append(model.weight.item())
        return next(scripted)

    config = TrainConfig(
        lr=0.1,
        batch_size=4,
        virtual_batch_size=4,
        max_epochs=4,
        patience=5,
        select_by=select_by,
        schedule="linear",
        warmup_ratio=0.25,
    )
    x = torch.randn(8, 1)
    result = fit(model, lambda idx: (model(x[idx]) ** 2).mean(), 8, validate, config, seed=0)
    return result, seen, model.weight.item()


def test_the_best_epoch_by_accuracy_or_by_loss():
    by_accuracy, seen, kept = _toy_fit("accuracy")
    assert by_accuracy.best_epoch == 2 and by_accuracy.best_val_accuracy == 0.9 and by_accuracy.best_val_loss == 2.0
    assert kept == pytest.approx(seen[1])  # the weights of epoch 2 are the ones kept
    assert _toy_fit("loss")[0].best_epoch == 4


def test_a_bad_recipe_setting_is_one_line():
    from redkit.errors import RedkitError

    with pytest.raises(RedkitError, match="training setting select_by = 'f1' is not one of loss, accuracy"):
        TrainConfig(select_by="f1")


def test_auto_settles_length_layers_and_epochs_from_the_data():
    assert covering_length([10] * 99 + [500], 256) == 10  # 99 % covered
    assert covering_length([10] * 98 + [500] * 2, 256) == 256  # capped at the backbone's limit
    short = settle([14] * 15_000, num_layers=6, limit=256)  # CLINC150's size
    assert (short.max_length, short.cut, short.trainable_layers, short.epochs) == (14, 0, 6, MAX_EPOCHS)
    long = settle([400] * 22_000, num_layers=6, limit=256, max_length=128)  # long texts cut at 128
    assert long.cut == 22_000 and long.tokens == 22_000 * 128
    assert long.tokens * long.trainable_layers * long.epochs <= TOKEN_BUDGET and long.epochs >= MIN_EPOCHS
    assert long.trainable_layers == 2
    assert settle([14] * 100, num_layers=6, limit=256, trainable_layers=3).trainable_layers == 3


@pytest.mark.slow
def test_every_layer_tuned_runs_the_whole_model():
    """trainable_layers = L: no frozen prefix; the features are the plain model's mean-pooled states."""
    from redkit.backbone import Backbone, BackboneConfig
    from redkit.backbone.model import pool

    backbone = Backbone(BackboneConfig(trainable_layers=6))
    assert backbone.split_at == 0 and backbone.run_prefix(torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3)) is None
    assert not any(p.requires_grad for p in backbone.model.embeddings.parameters())
    assert all(p.requires_grad for p in backbone.top_layers.parameters())
    enc = backbone.tokenize(["book a table for two", "hi"])
    with torch.no_grad():
        plain = pool(backbone.model(**enc).last_hidden_state, enc["attention_mask"], "mean")
        torch.testing.assert_close(backbone(enc["input_ids"], enc["attention_mask"]), plain)
    assert len(backbone.top_state_dict()) == len(backbone.layers.state_dict())


@pytest.mark.slow
def test_fit_says_what_auto_chose_and_records_it(tmp_path, capsys):
    from conftest import run_cli

    from redkit.fitting.topics import write_topics

    data = write_topics(tmp_path / "data", train=120, val=30, test=0, domains=2, labels_per_domain=2)
    code, out, err = run_cli(
        ["fit", "--data", data, "--out", tmp_path / "run", "--max-epochs", "1", "--references", "--max-length", "8"],
        capsys,
    )
    assert code == 0, err
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["backbone"]["max_length"] == 8 and config["backbone"]["trainable_layers"] == 6
    assert config["stage_overrides"]["base"]["select_by"] == "accuracy"
    line = next(line for line in out.splitlines() if line.startswith("[data] max_length 8 tokens"))
    cut = int(line.split("training texts fit, ")[1].split(" cut")[0].replace(",", ""))
    assert cut > 0 and "6 trainable layers" in line
    assert "max_length 8 tokens" in (tmp_path / "run" / "report.md").read_text()


@pytest.mark.slow
def test_empty_text_is_named_and_skip_invalid_counts_it(tmp_path, capsys):
    from conftest import run_cli

    from redkit.fitting.topics import topic_records

    rows = [json.dumps(r) for r in topic_records(40, 2, 2, seed=1)]
    rows[5] = json.dumps({"text": "  ", "label": "refund", "domain": "banking"})
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text("\n".join(rows) + "\n")
    code, _, err = run_cli(["fit", "--data", tmp_path / "data", "--out", tmp_path / "run"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "train.jsonl:6: field 'text' is empty (--skip-invalid drops such records and counts them)" in err
    code, out, err = run_cli(
        [
            "fit",
            "--data",
            tmp_path / "data",
            "--out",
            tmp_path / "run",
            "--skip-invalid",
            "--max-epochs",
            "1",
            "--references",
        ],
        capsys,
    )
    assert code == 0, err
    splits = json.loads((tmp_path / "run" / "data" / "splits.json").read_text())
    assert splits["splits"]["train"]["count"] + splits["splits"]["val"]["count"] == 39
    assert any(
        "--skip-invalid: 1 record with an empty text, label or domain left out (" in n and "train.jsonl:6" in n
        for n in splits["notes"]
    )
