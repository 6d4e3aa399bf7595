"""What a compact form of replay-free RED's shared statistics costs in accuracy (docs/results/incremental.md).

    python scripts/incremental_compact_statistics.py --out runs/inc-d0      # a study directory: its cached features

RED keeps, from every owner, its classes' counts and means and one summed within-class scatter of the random
features φ(h) (M = 2,048: a 2,048² float64 matrix, 33.6 MB, more than a buffer of every training feature). The same
owners' shares (trained once) are assembled with the router built from each compact form, and scored on val and
test after the last domain:

    float64          the statistics as kept (the default)
    float32          the scatter rounded to float32 (stored as its upper triangle: half of float32's bytes again)
    M = 1024, 512    fewer random features (float32, upper triangle)
    means only       no scatter at all: each class a Gaussian with one spherical covariance (the shrinkage at 1)

Nothing here chooses anything: the default stays the one chosen on val (scripts/incremental_router_grid.py).
"""

import argparse
from pathlib import Path

import torch

from redkit.incremental.gaussian import discriminant, domain_scores
from redkit.incremental.projection import WIDTH, ProjectionConfig, RandomProjection
from redkit.incremental.statistics import ClassStatistics
from redkit.plugins import load_plugins
from redkit_experiments.incremental.methods import METHODS
from redkit_experiments.incremental.study import IncrementalConfig, StudyContext

FORMS = (  # (name, M, bytes per scatter entry, upper triangle only, shrinkage or None for the default)
    ("float64", WIDTH, 8, False, None),
    ("float32", WIDTH, 4, True, None),
    ("M = 1024", 1024, 4, True, None),
    ("M = 512", 512, 4, True, None),
    ("means only", WIDTH, 0, True, 1.0),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="a study directory (its cache is reused)")
    parser.add_argument("--data", type=Path, default=Path("data/clinc150"))
    args = parser.parse_args()
    load_plugins()
    context = StudyContext(IncrementalConfig(data_dir=str(args.data.resolve())), args.out)
    stream, shrinkage = context.stream, context.config.shrinkage
    domain_of = torch.zeros(len(stream.classes), dtype=torch.long)
    for k, step in enumerate(stream.steps):
        domain_of[list(step.classes)] = k
    labels = tuple(stream.classes)
    red = METHODS["red"](context.setting)
    shares = [red.share(context.step_data(t)) for t in range(len(stream.steps))]
    within = {}
    for split in ("val", "test"):  # (N, C) each owner's own distribution over its classes
        within[split] = torch.full((len(stream.class_of[split]), len(labels)), float("-inf"), dtype=torch.float64)
        with torch.no_grad():
            for share in shares:
                within[split][:, red.columns[share.name]] = share.log_probs(context.features[split]).double()
    print(f"{'form':>12s} {'bytes':>10s} {'val RED':>8s} {'test RED':>9s} {'test router':>12s}")
    for name, width, entry_bytes, upper, form_shrinkage in FORMS:
        projection = RandomProjection(ProjectionConfig(context.setting.dim, width))
        stats = ClassStatistics.of(projection(context.features["train"].double()), stream.class_of["train"], labels)
        if entry_bytes == 4:
            stats.scatter = stats.scatter.float().double()
        entries = width * (width + 1) // 2 if upper else width * width
        size = entries * entry_bytes + (stats.means.numel() + stats.counts.numel()) * (8 if entry_bytes == 8 else 4)
        weight, bias = discriminant(stats, shrinkage if form_shrinkage is None else form_shrinkage)
        figures = []
        for split in ("val", "test"):
            scores = projection(context.features[split].double()) @ weight.T + bias
            log_alpha = torch.log_softmax(domain_scores(scores, domain_of, len(stream.steps)), dim=1)
            truth = stream.class_of[split]
            right = (within[split] + log_alpha[:, domain_of]).argmax(dim=1) == truth
            figures.append(float(right.double().mean()))
            routed = float((log_alpha.argmax(dim=1) == domain_of[truth]).double().mean())
        print(f"{name:>12s} {size / 1e6:8.1f}MB {figures[0]:8.4f} {figures[1]:9.4f} {routed:12.4f}")


if __name__ == "__main__":
    main()
