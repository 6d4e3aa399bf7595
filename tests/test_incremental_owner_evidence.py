"""What replay-free owners say about a query (redkit_experiments/incremental/owner_evidence.py), the thresholds the
out-of-scope figures are read at (oos_operating_points.py) and the out-of-scope script's scores, checked by hand."""

import numpy as np
import torch
from conftest import load_script

from redkit_experiments.incremental.oos_operating_points import at_most_one_point
from redkit_experiments.incremental.owner_evidence import gaussians, nearest

oos_scores = load_script("incremental_oos_scores")


def test_an_owner_gaussians_and_the_nearest_class_log_likelihood():
    torch.manual_seed(0)
    z = torch.randn(40, 3, dtype=torch.float64)
    local = torch.arange(40) % 2
    density = gaussians(z, local, ("a", "b"))
    means = torch.stack([z[local == c].mean(0) for c in (0, 1)])
    centred = z - means[local]
    covariance = centred.T @ centred / (40 - 2)
    shrunk = 0.8 * covariance + 0.2 * torch.trace(covariance) / 3 * torch.eye(3, dtype=torch.float64)
    assert torch.allclose(density.loc, means) and torch.allclose(density.covariance_matrix[0], shrunk)
    query = torch.tensor([[0.1, -0.2, 0.3]], dtype=torch.float64)
    by_hand = max(float(torch.distributions.MultivariateNormal(means[c], shrunk).log_prob(query[0])) for c in (0, 1))
    assert abs(float(nearest(density, query)[0]) - by_hand) < 1e-10


def test_the_operating_point_gives_up_at_most_one_point_of_in_scope_accuracy():
    # 100 in-scope queries scored 1..100, the 2 lowest wrong; 10 OOS queries scored 0.5 .. 9.5
    in_scores = np.arange(1, 101, dtype=float)
    in_right = np.arange(100) >= 2
    oos = np.arange(10) + 0.5
    val = (in_scores, in_right, oos)
    # accuracy 0.98 on val: the floor is 0.97, so up to 1 more right query may be rejected besides the 2 wrong ones:
    # τ = 4 rejects the scores 1, 2, 3 (one right) and the OOS scores 0.5 .. 3.5 (4 of 10); τ = 5 would lose two
    chosen = at_most_one_point(val, val)
    assert chosen["threshold"] == 4.0
    assert chosen["in_scope_accuracy"] == 0.97 and chosen["oos_recall"] == 0.4


def test_the_oos_scores_read_the_routed_owner_and_the_best_over_owners():
    # 2 queries, 2 owners; query 0 routed to owner 1, query 1 to owner 0
    e = {
        "ridge": torch.tensor([[0.2, 0.9], [0.7, 0.1]], dtype=torch.float64),
        "confidence": torch.tensor([[0.5, 0.8], [0.6, 0.9]], dtype=torch.float64),
        "density": torch.tensor([[-9.0, -3.0], [-4.0, -1.0]], dtype=torch.float64),
        "density, calibrated": torch.tensor([[2.0, -1.0], [0.5, 3.0]], dtype=torch.float64),
        "pretrained density, calibrated": torch.tensor([[0.0, 1.5], [-2.0, 0.0]], dtype=torch.float64),
        "lower density, calibrated": torch.tensor([[0.25, 0.5], [0.75, 1.0]], dtype=torch.float64),
        "energy": torch.tensor([[4.0, 5.0], [6.0, 7.0]], dtype=torch.float64),
    }
    scores = oos_scores.scores_of(e, e["ridge"].argmax(-1))
    assert scores["maximum softmax probability"].tolist() == [0.8, 0.6]
    assert scores["ridge"].tolist() == [0.9, 0.7]
    assert scores["density"].tolist() == [-3.0, -4.0]
    assert scores["density, calibrated"].tolist() == [-1.0, 0.5]
    assert scores["pretrained density, calibrated"].tolist() == [1.5, -2.0]
    assert scores["best owner's density, calibrated"].tolist() == [2.0, 3.0]
    assert scores["lower density, calibrated"].tolist() == [0.5, 0.75] and scores["energy"].tolist() == [5.0, 6.0]
