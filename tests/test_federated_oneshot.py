"""The one-shot federated baselines (redkit/federated/oneshot/) on small random features: the owners' merged
uploads give the classifier the centralised computation gives on the pooled features, bytes are the arrays'
sizes, FedCOF's covariance estimate is the hand computation and unbiased, and malformed uploads are refused."""

import pytest
import torch
from torch.nn import functional as F

from redkit.errors import RedkitError
from redkit.federated.oneshot import (
    ONESHOT,
    FourierFeatures,
    Upload,
    as_wire,
    compact_bytes,
    fedcof_covariance,
    upload_bytes,
)
from redkit.incremental.statistics import ClassStatistics

DIM, CLASSES, PER_CLASS = 6, 5, 12
LABELS = tuple(f"c{i}" for i in range(CLASSES))


def pooled(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(h (N, d) float64, y (N,)): PER_CLASS examples of each class around its own centre."""
    generator = torch.Generator().manual_seed(seed)
    centres = 2 * torch.randn(CLASSES, DIM, generator=generator, dtype=torch.float64)
    y = torch.arange(CLASSES).repeat_interleave(PER_CLASS)
    return centres[y] + torch.randn(len(y), DIM, generator=generator, dtype=torch.float64), y


def owners_of(h, y, split: dict[str, list[int]]) -> dict[str, tuple]:
    """{owner: (h, y into its labels, its labels)} holding the given classes (all their examples)."""
    out = {}
    for name, classes in split.items():
        rows = torch.cat([(y == c).nonzero().flatten() for c in classes])
        labels = tuple(LABELS[c] for c in classes)
        out[name] = (h[rows], torch.tensor([classes.index(int(c)) for c in y[rows]]), labels)
    return out


DISJOINT = {"b": [3, 4], "a": [0, 1, 2]}  # each class one owner's, as CLINC150's domains


def uploads(method, owners) -> dict[str, Upload]:
    return {name: method.upload(*data) for name, data in owners.items()}


def in_pooled_order(classifier, h) -> torch.Tensor:
    """(N, C) the classifier's scores with the columns in LABELS' order."""
    return classifier.scores(h)[:, [classifier.labels.index(label) for label in LABELS]]


def test_fedncm_merged_is_the_central_class_means_exactly():
    h, y = pooled()
    method = ONESHOT["fedncm"](DIM, wire=torch.float64)
    classifier = method.server(uploads(method, owners_of(h, y, DISJOINT)))
    means = ClassStatistics.of(h, y, LABELS).means  # central: statistics.py's class means of the pooled features
    order = [classifier.labels.index(label) for label in LABELS]
    assert torch.equal(classifier.weight[order], F.normalize(means, dim=1))
    queries = pooled(seed=1)[0]
    central = F.normalize(queries, dim=1) @ F.normalize(means, dim=1).T  # cosine
    assert torch.equal(in_pooled_order(classifier, queries), central)


def test_fedncm_class_split_between_owners_is_count_weighted():
    h, y = pooled()
    first = torch.cat([(y == c).nonzero().flatten()[:5] for c in range(CLASSES)])
    rest = torch.cat([(y == c).nonzero().flatten()[5:] for c in range(CLASSES)])
    method = ONESHOT["fedncm"](DIM, wire=torch.float64)
    ups = {name: method.upload(h[rows], y[rows], LABELS) for name, rows in (("a", first), ("b", rest))}
    means = torch.stack([h[y == c].mean(dim=0) for c in range(CLASSES)])
    assert torch.allclose(method.server(ups).weight, F.normalize(means, dim=1), atol=1e-14)


@pytest.mark.parametrize(
    "name, plan", [("fed3r", {}), ("fed3r-rf", {"width": 32, "sigma": 3.0}), ("fed3r-relu", {"width": 32})]
)
def test_fed3r_merged_is_the_central_ridge(name, plan):
    h, y = pooled()
    method = ONESHOT[name](DIM, **plan)
    classifier = method.server(uploads(method, owners_of(h, y, DISJOINT)), ridge=1e-3)
    # central, as src/fed3r.py: features with a bias column, A = ΦᵀΦ + λI, W = A⁻¹ΦᵀY, columns normalised
    phi = method.map(h)  # (N, D+1)
    gram = phi.T @ phi
    lam = 1e-3 * torch.trace(gram) / len(gram)
    solution = torch.linalg.solve(gram + lam * torch.eye(len(gram), dtype=gram.dtype), phi.T @ F.one_hot(y).double())
    norm = solution[:-1].norm(dim=0)
    queries = pooled(seed=1)[0]
    central = (method.map(queries) @ solution) / norm  # the bias column's weight included
    merged = in_pooled_order(classifier, queries)
    assert (merged - central).abs().max() < 1e-8 * central.abs().max()
    assert classifier.details["lambda"] == pytest.approx(float(lam), rel=1e-12)


def test_fourier_features_approximate_the_gaussian_kernel():
    h = pooled()[0][:20] / 3
    phi = FourierFeatures(DIM, 20_000, sigma=2.0, seed=0, bias=False)(h)
    kernel = torch.exp(-(torch.cdist(h, h) ** 2) / (2 * 2.0**2))
    assert (phi @ phi.T - kernel).abs().max() < 0.05


def test_bytes_are_the_arrays_sizes_in_the_wire_type():
    h, y = pooled()
    owners = owners_of(h, y, DISJOINT)
    h_a, y_a, labels_a = owners["a"]
    fed3r = ONESHOT["fed3r"](DIM)  # float64: (d+1)² + C_k (d+1)
    assert upload_bytes(fed3r.upload(h_a, y_a, labels_a)) == 8 * ((DIM + 1) ** 2 + 3 * (DIM + 1))
    ncm = ONESHOT["fedncm"](DIM)  # float32: C_k + C_k d
    upload = ncm.upload(h_a, y_a, labels_a)
    assert (
        upload_bytes(upload) == 4 * (3 + 3 * DIM) == sum(t.numel() * t.element_size() for t in upload.arrays.values())
    )
    assert upload_bytes(as_wire(upload, torch.float64)) == 2 * upload_bytes(upload)
    cof = ONESHOT["fedcof"](DIM, subsets=3)  # 12 examples a class: 3 means of 4
    upload = cof.upload(h_a, y_a, labels_a)
    assert upload.classes == tuple(label for label in labels_a for _ in range(3))
    assert upload_bytes(upload) == 4 * 9 * (1 + DIM) and upload.arrays["counts"].tolist() == [4.0] * 9
    assert ncm.plan_bytes() == 0 and ONESHOT["fedcof"](DIM).plan_bytes() == 0 and cof.plan_bytes() > 0


def test_compact_bytes_send_fed3rs_gram_matrix_as_its_triangle_and_leave_means_as_they_are():
    """On RED's wire (redkit/federated/compact.py) a Fed3R-RF upload's (D+1)² Gram matrix shrinks to well under
    half; FedNCM's means, with no symmetric matrix, cost their bytes and the file's header."""
    h, y = pooled()
    fed3r = ONESHOT["fed3r-rf"](DIM, width=64, sigma=2.0, seed=0)
    upload = fed3r.upload(h, y, LABELS)
    assert compact_bytes(upload) < 0.5 * upload_bytes(upload)
    means = ONESHOT["fedncm"](DIM).upload(h, y, LABELS)
    assert upload_bytes(means) < compact_bytes(means) < upload_bytes(means) + 512


def test_fedcof_covariance_is_the_hand_computation_on_two_clients():
    counts = torch.tensor([2.0, 3.0], dtype=torch.float64)
    means = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
    mu = (2 * means[0] + 3 * means[1]) / 5  # (0.4, 1.2)
    hand = (2 * torch.outer(means[0] - mu, means[0] - mu) + 3 * torch.outer(means[1] - mu, means[1] - mu)) / (2 - 1)
    assert torch.allclose(fedcof_covariance(counts, means), hand, atol=1e-15)
    assert torch.allclose(hand, torch.tensor([[1.2, -2.4], [-2.4, 4.8]], dtype=torch.float64))
    # one client: nothing to estimate, the authors' code divides the zero spread by 1
    assert torch.equal(fedcof_covariance(counts[:1], means[:1]), torch.zeros(2, 2, dtype=torch.float64))


def test_fedcof_covariance_is_unbiased():
    generator = torch.Generator().manual_seed(0)
    factor = torch.tensor([[1.0, 0.0, 0.0], [0.5, 2.0, 0.0], [-0.3, 0.2, 0.5]], dtype=torch.float64)
    covariance = factor @ factor.T
    counts = torch.tensor([3.0, 5.0, 8.0, 4.0], dtype=torch.float64)  # 4 clients of one class
    draws = 4000
    estimates = torch.zeros(3, 3, dtype=torch.float64)
    for _ in range(draws):
        means = torch.stack(
            [(torch.randn(int(n), 3, generator=generator, dtype=torch.float64) @ factor.T).mean(0) for n in counts]
        )
        estimates += fedcof_covariance(counts, means)
    assert (estimates / draws - covariance).abs().max() < 0.06 * covariance.abs().max()  # dividing by K: 25 % off


def test_fedcof_one_mean_per_class_is_the_authors_shrinkage_ridge():
    h, y = pooled()
    method = ONESHOT["fedcof"](DIM, wire=torch.float64)
    classifier = method.server(uploads(method, owners_of(h, y, DISJOINT)), shrink=0.5)
    assert classifier.details == {"classes_with_one_mean": CLASSES, "means": CLASSES}
    # federate_classes.py with one client per class: covs = γI, G = Σ (n_c - 1) γ I + N ḡḡᵀ, W = G⁻¹ B
    counts = torch.bincount(y).double()
    sums = torch.stack([h[y == c].sum(dim=0) for c in range(CLASSES)])
    g = sums.sum(0) / counts.sum()
    gram = 0.5 * (counts - 1).sum() * torch.eye(DIM, dtype=torch.float64) + counts.sum() * torch.outer(g, g)
    weight = F.normalize(torch.linalg.solve(gram, sums.T).T, dim=1)
    order = [classifier.labels.index(label) for label in LABELS]
    assert torch.allclose(classifier.weight[order], weight, atol=1e-12)


def test_fedcof_with_clients_sharing_classes_uses_their_spread():
    h, y = pooled()
    first = torch.cat([(y == c).nonzero().flatten()[:4] for c in range(CLASSES)])
    rest = torch.cat([(y == c).nonzero().flatten()[4:] for c in range(CLASSES)])
    method = ONESHOT["fedcof"](DIM, wire=torch.float64)
    ups = {name: method.upload(h[rows], y[rows], LABELS) for name, rows in (("a", first), ("b", rest))}
    merged = method.aggregate(sorted(ups.items()))
    assert merged.clients.tolist() == [2.0] * CLASSES
    expected = sum(
        (PER_CLASS - 1)
        * fedcof_covariance(
            torch.tensor([4.0, 8.0], dtype=torch.float64),
            torch.stack([h[first][y[first] == c].mean(0), h[rest][y[rest] == c].mean(0)]),
        )
        for c in range(CLASSES)
    )
    assert torch.allclose(merged.within, expected, atol=1e-10)


@pytest.mark.parametrize(
    "name, change, message",
    [
        ("fedncm", lambda u: {"counts": u["counts"], "means": u["means"][:, :-1]}, "expected (3, 6)"),
        ("fed3r", lambda u: {"G": u["G"][:-1, :-1], "class_sums": u["class_sums"]}, "expected (7, 7)"),
        ("fedcof", lambda u: {"means": u["means"]}, "sent arrays ['means']"),
        ("fedcof", lambda u: {"counts": -u["counts"], "means": u["means"]}, "positive whole numbers"),
        ("fedncm", lambda u: {"counts": u["counts"], "means": u["means"] * float("nan")}, "not finite"),
    ],
)
def test_malformed_uploads_are_refused_in_one_line(name, change, message):
    h, y = pooled()
    method = ONESHOT[name](DIM)
    ups = uploads(method, owners_of(h, y, DISJOINT))
    ups["a"] = Upload(ups["a"].classes, change(ups["a"].arrays))
    with pytest.raises(RedkitError, match="owner 'a'") as error:
        method.server(ups)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_an_owner_of_other_widths_and_unknown_names_are_refused():
    h, y = pooled()
    with pytest.raises(RedkitError, match=r"features of shape \(60, 6\), the plan's are \(N, 5\)"):
        ONESHOT["fed3r"](DIM - 1).upload(h, y, LABELS)
    with pytest.raises(RedkitError, match="unknown one-shot method 'fedcov'; did you mean 'fedcof'"):
        ONESHOT["fedcov"]
    with pytest.raises(RedkitError, match="unknown plan setting 'sigma'"):
        ONESHOT["fed3r"](DIM, sigma=1.0)
