"""The non-modular references (joint, linear_probe) on a set of two labels shared by two domains:
scikit-learn's binary LogisticRegression keeps one row of weights, and a copy of it in both rows of
the saved head predicted one class for every input (a defect found on a two-label set)."""

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from redkit.references.linear_probe import softmax_rows


@pytest.mark.parametrize("classes", [2, 3])
def test_saved_rows_give_scikit_learns_probabilities(classes):
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 5))
    y = (x @ rng.normal(size=(5, classes))).argmax(axis=1)
    model = LogisticRegression().fit(x, y)
    coef, intercept = softmax_rows(model.coef_, model.intercept_, classes)
    probs = torch.softmax(torch.tensor(x @ coef.T + intercept), dim=-1).numpy()
    assert coef.shape == (classes, 5)
    np.testing.assert_allclose(probs, model.predict_proba(x), atol=1e-9)


def _two_label_set(directory: Path) -> Path:
    """Reviews of two products (the domains) that are good or bad (the labels, shared by both)."""
    rng = random.Random(0)
    words = {"good": ("great", "excellent", "love it", "works well"), "bad": ("awful", "broken", "hate it", "useless")}
    products = {"phones": ("phone", "charger", "screen"), "movies": ("film", "plot", "actor")}
    directory.mkdir(parents=True)
    for split, n in (("train", 160), ("val", 40), ("test", 40)):
        rows = []
        for _ in range(n):
            domain, label = rng.choice(list(products)), rng.choice(list(words))
            text = f"the {rng.choice(products[domain])} is {rng.choice(words[label])}"
            rows.append(json.dumps({"text": text, "label": label, "domain": domain}))
        (directory / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
    return directory


@pytest.mark.slow
def test_every_reference_predicts_both_labels_of_a_two_label_set(tmp_path):
    import redkit
    from redkit.references import REFERENCES

    data = _two_label_set(tmp_path / "data")
    # base fraction 0.5: joint is trained on its own, not read off stage base
    fitted = redkit.fit(
        data,
        tmp_path / "run",
        base_fraction=0.5,
        max_epochs=2,
        references=tuple(REFERENCES.names()),
        print_fn=lambda *_: None,
    )
    run = fitted.run
    test = run.splits["test"]
    truth = run.classes(test)
    for name in REFERENCES.names():
        predicted = REFERENCES[name].probs(run, "test", [ex.question for ex in test]).argmax(dim=-1)
        assert set(predicted.tolist()) == {0, 1}, name  # both labels, not one for every input
        assert (predicted == truth).float().mean() > 0.9, name
