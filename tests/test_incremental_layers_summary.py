"""scripts/incremental_layers_summary.py: every layer's rate chosen on the search's seed, compared on the others."""

import json

from conftest import load_script

summary_script = load_script("incremental_layers_summary")
CHOSEN = {"er_1000": {"lr": 2e-4}, "lwf": {"lr": 5e-4}}


def row(method, layers, lr, seed, accuracy, seconds=10.0):
    out = {"method": method, "layers": layers, "lr": lr, "final_accuracy": accuracy, "seconds": seconds}
    return out if seed is None else out | {"seed": seed}


def rows(every_layer_other_seeds: float) -> list[dict]:
    """Seed 0 (no seed: the search's) favours every layer at 1e-4 for both strategies; seeds 1 and 2 as given."""
    out = []
    for method in CHOSEN:
        out += [row(method, 6, 5e-5, None, 0.90), row(method, 6, 1e-4, None, 0.95)]
        out += [row(method, 2, CHOSEN[method]["lr"], None, 0.91)]
        for seed, shift in ((1, 0.0), (2, 0.01)):
            out += [row(method, 2, CHOSEN[method]["lr"], seed, 0.90 + shift)]
            out += [row(method, 6, 1e-4, seed, 0.90 + shift + every_layer_other_seeds + 0.001 * seed)]
            out += [row(method, 6, 5e-5, seed, 0.99)]  # another rate: never compared
    return out


def test_every_layer_rate_is_chosen_on_the_search_seed_and_compared_on_the_others():
    result = summary_script.summarize(rows(-0.02), CHOSEN)
    er = result["strategies"]["er_1000"]
    assert er["every_layer_lr"] == 1e-4  # the best on seed 0, though 5e-5 is better on the others
    assert [round(d, 12) for d in er["differences"]] == [-0.019, -0.018]  # seed 1, seed 2
    assert result["pairs"] == 4  # two strategies, seeds 1 and 2: seed 0's pair is left out
    assert abs(result["mean_difference"] - (-0.0185)) < 1e-12
    assert not result["every_layer_wins"]
    assert "Kept: the top 2" in summary_script.markdown(result)


def test_every_layer_wins_when_it_is_better_on_the_other_seeds(tmp_path):
    path = tmp_path / "layers.json"
    path.write_text(json.dumps({"rows": rows(+0.03)}))
    result = summary_script.summarize(summary_script.read_rows([path]), CHOSEN)
    assert result["mean_difference"] > 0.03 and result["p"] < 0.05
    assert result["every_layer_wins"]
    assert "Kept: every layer" in summary_script.markdown(result)
