"""How the replay-free router's two settings were chosen: on CLINC150's val, never its test.

    python scripts/incremental_router_grid.py --out runs/inc-d0      # a study directory: its cached features

For every width M of the random features φ(h) (0: the backbone's own d) and every shrinkage λ, the
shared-covariance Gaussian is built from every domain's training statistics (redkit/incremental) and scored on
val: how often its top class is right, how often its top domain (the router's choice) is, and how often
replay-free RED, the owners' shares (trained once, on their own train and val) assembled with that router, is
right. The defaults (redkit/incremental/projection.py: WIDTH, gaussian.py: SHRINKAGE) are the best by val RED
accuracy.
"""

import argparse
from pathlib import Path

import torch

from redkit.incremental.gaussian import discriminant, domain_scores
from redkit.incremental.projection import ProjectionConfig, RandomProjection
from redkit.incremental.statistics import ClassStatistics
from redkit.plugins import load_plugins
from redkit_experiments.incremental.methods import METHODS
from redkit_experiments.incremental.study import IncrementalConfig, StudyContext

WIDTHS = (0, 1024, 2048, 4096)
SHRINKAGES = (0.05, 0.2, 0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="a study directory (its cache is reused)")
    parser.add_argument("--data", type=Path, default=Path("data/clinc150"))
    args = parser.parse_args()
    load_plugins()
    context = StudyContext(IncrementalConfig(data_dir=str(args.data.resolve())), args.out)
    stream = context.stream
    domain_of = torch.zeros(len(stream.classes), dtype=torch.long)
    for k, step in enumerate(stream.steps):
        domain_of[list(step.classes)] = k
    train_y, val_y = stream.class_of["train"], stream.class_of["val"]
    labels = tuple(stream.classes)
    red = METHODS["red"](context.setting)
    within = torch.full((len(val_y), len(labels)), float("-inf"))  # (N, C) each owner's own distribution
    for t in range(len(stream.steps)):
        share = red.share(context.step_data(t))
        with torch.no_grad():
            within[:, red.columns[share.name]] = share.log_probs(context.features["val"])
    own = within.masked_fill(domain_of[None, :] != domain_of[val_y][:, None], float("-inf"))  # the true domain given
    print(
        f"the owners' classifiers given the true domain, val accuracy: {float((own.argmax(1) == val_y).double().mean()):.4f}"
    )
    print(f"{'M':>5s} {'lambda':>7s} {'val class acc':>14s} {'val domain acc':>15s} {'val RED acc':>12s}")
    for width in WIDTHS:
        projection = RandomProjection(ProjectionConfig(context.setting.dim, width))
        x = projection(context.features["train"].double())
        vx = projection(context.features["val"].double())
        stats = ClassStatistics.of(x, train_y, labels)
        for shrinkage in SHRINKAGES:
            weight, bias = discriminant(stats, shrinkage)
            scores = vx @ weight.T + bias
            classes = float((scores.argmax(dim=1) == val_y).double().mean())
            log_alpha = torch.log_softmax(domain_scores(scores, domain_of, len(stream.steps)), dim=1)
            routed = float((log_alpha.argmax(dim=1) == domain_of[val_y]).double().mean())
            assembled = within.double() + log_alpha[:, domain_of]
            right = float((assembled.argmax(dim=1) == val_y).double().mean())
            print(f"{width:5d} {shrinkage:7.2f} {classes:14.4f} {routed:15.4f} {right:12.4f}")


if __name__ == "__main__":
    main()
