"""The replay-free statistics baselines of the incremental study, KLDA and KLDA-E (methods/klda.py) and RanPAC
without its first-session adaptation (methods/ranpac.py), against independent computations written from the
authors' code, on small random steps built by hand (no backbone)."""

import math
from types import SimpleNamespace

import pytest
import torch
from torch.nn import functional as F

from redkit.backbone import BackboneConfig
from redkit.errors import RedkitError
from redkit.features import PrefixStates
from redkit.incremental.projection import ProjectionConfig, RandomProjection
from redkit_experiments.incremental.data import Examples, StepData
from redkit_experiments.incremental.methods import METHODS, Setting, klda, ranpac

DIM, CLASSES, WIDTH = 6, 6, 64  # d, C, and the random features' width the tests use (D for KLDA, M for RanPAC)


def _examples(x: torch.Tensor, y: torch.Tensor | None = None) -> Examples:
    n = len(x)
    prefix = PrefixStates(torch.zeros(n, 1, dtype=torch.long), torch.ones(n, 1, dtype=torch.long), None)
    return Examples(x, prefix, tuple(f"text {i}" for i in range(n)), y)


def _setting(seed: int = 0) -> Setting:
    names = tuple(f"class{c}" for c in range(CLASSES))
    projection = RandomProjection(ProjectionConfig(DIM, 8))
    return Setting(SimpleNamespace(seed=seed), names, 2, DIM, torch.device("cpu"), projection, BackboneConfig())


def _steps(per_class: int, seed: int = 0) -> list[StepData]:
    """Two steps of three Gaussian classes each, `per_class` train and 10 val examples of each class."""
    g = torch.Generator().manual_seed(seed)
    centres = 1.5 * torch.randn(CLASSES, DIM, generator=g)

    def draw(classes: tuple[int, ...], n: int) -> Examples:
        y = torch.tensor(classes).repeat_interleave(n)
        return _examples(centres[y] + torch.randn(len(y), DIM, generator=g), y)

    return [StepData(t, f"d{t}", cs, draw(cs, per_class), draw(cs, 10)) for t, cs in enumerate([(0, 1, 2), (3, 4, 5)])]


def _pooled(steps: list[StepData]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.cat([s.train.features for s in steps]), torch.cat([s.train.classes for s in steps])


def _queries(n: int = 40) -> torch.Tensor:
    return 1.5 * torch.randn(n, DIM, generator=torch.Generator().manual_seed(9))


def _authors_map(seed: int, sigma: float, width: int):
    """KLDA.py's draw (KLDA.__init__, _compute_rff), under the global seed as the authors set it."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        omega = torch.normal(0, float(torch.sqrt(torch.tensor(2 * sigma, dtype=torch.float32))), (DIM, width))
        b = torch.rand(width) * 2 * torch.pi
    return lambda x: math.sqrt(2.0 / width) * torch.cos(x.double() @ omega.double() + b.double())


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(klda.KLDA, "width", WIDTH)
    monkeypatch.setattr(ranpac.RanPAC, "width", WIDTH)


def test_fourier_features_are_the_authors_draws_and_approximate_the_gaussian_kernel():
    sigma, width = 0.05, 50_000
    features = klda.FourierFeatures(DIM, width, seed=3)
    x = torch.randn(20, DIM, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(features(x, sigma), _authors_map(3, sigma, width)(x), atol=1e-6)
    phi = features(x, sigma)  # (20, D)
    kernel = torch.exp(-sigma * torch.cdist(x.double(), x.double()) ** 2)
    assert (phi @ phi.T - kernel).abs().max() < 0.03  # Monte Carlo error ~ 1/√D
    assert torch.equal(klda.FourierFeatures(DIM, width, seed=3).normal, features.normal)  # from the seed alone


@pytest.mark.parametrize("per_class", [40, 8])  # S of full rank (234 ≥ D = 64); singular (S⁺ ≠ S⁻¹: 42 < 64)
def test_klda_scores_are_minus_the_mahalanobis_distance_under_the_pseudo_inverse(small, per_class):
    steps = _steps(per_class)
    method = METHODS["klda"](_setting(seed=4))
    for step in steps:
        method.learn(step)
    phi = _authors_map(4, method.details()["sigma"], WIDTH)
    x, y = _pooled(steps)
    h = phi(x)  # (N, D), every step's examples at once, as the authors' fit
    means = torch.stack([h[y == c].mean(dim=0) for c in range(CLASSES)])
    centred = h - means[y]
    inverse = torch.linalg.pinv(centred.T @ centred, hermitian=True)  # the authors' torch.pinverse
    diff = means[None] - phi(_queries())[:, None]  # (N, C, D)
    expected = -torch.einsum("ncd,de,nce->nc", diff, inverse, diff)  # KLDA.get_logits
    got = method.scores(_examples(_queries().float()))
    assert torch.equal(got.argmax(dim=1), expected.argmax(dim=1))
    scale = (expected - expected[:, :1]).abs().max()
    assert torch.allclose(got - got[:, :1], expected - expected[:, :1], atol=1e-3 * float(scale))


def test_klda_statistics_summed_over_steps_are_those_of_the_pooled_data_in_either_order(small):
    steps = _steps(20)
    features = klda.FourierFeatures(DIM, WIDTH, seed=0)
    forward, backward = (klda.Discriminant(features, 0.02, CLASSES) for _ in range(2))
    for step in steps:
        forward.add(step.train.features, step.train.classes)
    for step in reversed(steps):
        backward.add(step.train.features, step.train.classes)
    x, y = _pooled(steps)
    h = features(x, 0.02)
    means = torch.stack([h[y == c].mean(dim=0) for c in range(CLASSES)])
    scatter = sum((h[y == c] - means[c]).T @ (h[y == c] - means[c]) for c in range(CLASSES))
    for model in (forward, backward):
        assert torch.equal(model.counts, torch.bincount(y).double())
        assert torch.allclose(model.means, means, atol=1e-12)
        assert torch.allclose(model.scatter, scatter, atol=1e-10)
    with pytest.raises(RedkitError, match="came back"):
        forward.add(steps[0].train.features, steps[0].train.classes)


def test_klda_chooses_sigma_once_on_the_first_steps_val(small):
    steps = _steps(20)
    method = METHODS["klda"](_setting())
    method.learn(steps[0])
    chosen = method.details()
    for sigma in klda.SIGMAS:  # each σ's model, fit on step 1's train and scored on its val, independently
        model = klda.Discriminant(klda.FourierFeatures(DIM, WIDTH, 0), sigma, CLASSES)
        model.add(steps[0].train.features, steps[0].train.classes)
        right = model.scores(steps[0].val.features).argmax(dim=1) == steps[0].val.classes
        assert chosen["val_accuracy_by_sigma"][f"{sigma:g}"] == pytest.approx(float(right.double().mean()))
    accuracy = chosen["val_accuracy_by_sigma"]
    best = [s for s in klda.SIGMAS if accuracy[f"{s:g}"] == max(accuracy.values())]
    assert chosen["sigma"] == min(best, key=lambda s: abs(math.log(s / klda.AUTHORS_SIGMA)))
    method.learn(steps[1])
    assert method.details()["sigma"] == chosen["sigma"]  # fixed after step 1
    assert method.kept().statistics_bytes == (CLASSES * (1 + WIDTH) + WIDTH * WIDTH) * 8


def test_klda_e_sums_its_members_softmax_probabilities(small):
    steps = _steps(20)
    ensemble, single = METHODS["klda_e"](_setting(seed=2)), METHODS["klda"](_setting(seed=2))
    ensemble.learn(steps[0])
    single.learn(steps[0])
    members = ensemble.discriminants
    assert len(members) == klda.MEMBERS and len({m.sigma for m in members}) == 1
    for m, member in enumerate(members):  # member m: the map of seed + m
        assert torch.equal(member.features.normal, klda.FourierFeatures(DIM, WIDTH, 2 + m).normal)
    assert torch.equal(members[0].features.normal, single.discriminants[0].features.normal)
    queries = _queries()
    total = sum(torch.softmax(member.scores(queries), dim=1) for member in members)  # KLDA_E.predict
    got = ensemble.scores(_examples(queries))
    assert torch.equal(got.argmax(dim=1), total.argmax(dim=1))
    assert torch.allclose(torch.softmax(got, dim=1), total / klda.MEMBERS, atol=1e-12)
    assert torch.isinf(got[:, 3:]).all() and torch.isfinite(got[:, :3]).all()  # step 2's classes not yet seen
    assert ensemble.kept().statistics_bytes == klda.MEMBERS * (3 * (1 + WIDTH) + WIDTH * WIDTH) * 8


def test_ranpac_weights_are_the_ridge_solution_of_the_pooled_sums(small):
    steps = _steps(30)
    method = METHODS["ranpac"](_setting(seed=5))
    method.learn(steps[0])
    assert torch.isinf(method.scores(_examples(_queries()))[:, 3:]).all()
    method.learn(steps[1])
    w_rand = torch.randn(DIM, WIDTH, generator=torch.Generator().manual_seed(5)).double()
    x, y = _pooled(steps)
    h = F.relu(x.double() @ w_rand)
    gram, targets = h.T @ h, h.T @ F.one_hot(y, CLASSES).double()
    assert torch.allclose(method.G, gram) and torch.allclose(method.Q, targets)
    ridge = method.details()["ridge_by_step"][-1]
    weight = torch.linalg.solve(gram + ridge * torch.eye(WIDTH, dtype=torch.float64), targets)  # RanPAC.py
    assert torch.allclose(method.W, weight, rtol=1e-6, atol=1e-9 * float(weight.abs().max()))
    queries = _queries()
    expected = F.relu(queries.double() @ w_rand) @ weight
    assert torch.allclose(method.scores(_examples(queries)), expected, rtol=1e-6, atol=1e-9)
    assert method.kept().statistics_bytes == (WIDTH * WIDTH + WIDTH * CLASSES) * 8


def _authors_ridge_losses(h_fit, y_fit, h_held, y_held) -> torch.Tensor:
    """RanPAC.optimise_ridge_parameter's loop, in float64."""
    gram, q = h_fit.T @ h_fit, h_fit.T @ y_fit
    eye = torch.eye(len(gram), dtype=torch.float64)
    return torch.stack([F.mse_loss(h_held @ torch.linalg.solve(gram + r * eye, q), y_held) for r in ranpac.RIDGES])


@pytest.mark.parametrize("n", [40, 200])  # fewer examples than M = 64 (the dual eigendecomposition), more
def test_ranpac_ridge_search_is_the_authors_loop_and_picks_the_best_held_out_ridge(n):
    g = torch.Generator().manual_seed(n)
    h = F.relu(torch.randn(n, WIDTH, generator=g, dtype=torch.float64))
    clean = F.one_hot((h @ torch.randn(WIDTH, 3, generator=g, dtype=torch.float64)).argmax(dim=1), 3).double()
    noise = F.one_hot(torch.randint(3, (n,), generator=g), 3).double()  # targets unrelated to h
    k = int(n * ranpac.FIT_FRACTION)
    for y in (clean, noise):
        losses = ranpac.ridge_losses(h[:k], y[:k], h[k:], y[k:])
        authors = _authors_ridge_losses(h[:k], y[:k], h[k:], y[k:])
        assert torch.allclose(losses[8:], authors[8:], rtol=1e-6)  # λ ≥ 1: well-posed solves agree closely
        assert torch.allclose(losses, authors, rtol=1e-2)
        order = torch.randperm(n, generator=torch.Generator().manual_seed(7))
        shuffled = ranpac.ridge_losses(h[order][:k], y[order][:k], h[order][k:], y[order][k:])
        assert ranpac.RanPAC.choose_ridge(h, y, seed=7) == ranpac.RIDGES[int(shuffled.argmin())]
    noisy = ranpac.RanPAC.choose_ridge(h, noise, seed=7)
    assert noisy >= 1e2  # nothing to learn: a heavy ridge wins
    assert noisy > ranpac.RanPAC.choose_ridge(h, clean, seed=7)


def test_ranpac_reads_every_feature_through_embed(small):
    class Doubled(ranpac.RanPAC):  # as RanPAC with its first-session adapter overrides it
        def embed(self, examples):
            return 2 * examples.features

    steps = _steps(20)
    method = Doubled(_setting())
    method.learn(steps[0])
    w_rand = torch.randn(DIM, WIDTH, generator=torch.Generator().manual_seed(0)).double()
    h = F.relu(2 * steps[0].train.features.double() @ w_rand)
    assert torch.allclose(method.G, h.T @ h)
    queries = _queries()
    expected = F.relu(2 * queries.double() @ w_rand) @ method.W
    assert torch.allclose(method.scores(_examples(queries))[:, :3], expected[:, :3])
