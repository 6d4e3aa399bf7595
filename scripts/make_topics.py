"""Write a generated labelled-text set for `redkit fit` (the speed benchmarks': 10,000 short texts,
or 22,000 texts of about 300 words with --sentences 25; 5 domains, 25 labels).

    python scripts/make_topics.py DIR [--train 5000] [--val 500] [--test 500] [--domains 5] [--labels-per-domain 5]
                                      [--sentences 1]
    time redkit fit --data DIR --out RUN
"""

import argparse

from redkit.fitting.topics import write_topics

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--train", type=int, default=5000)
    p.add_argument("--val", type=int, default=500)
    p.add_argument("--test", type=int, default=500)
    p.add_argument("--domains", type=int, default=5)
    p.add_argument("--labels-per-domain", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sentences", type=int, default=1, help="requests per text (25: about 300 words)")
    a = p.parse_args()
    print(write_topics(a.out, a.train, a.val, a.test, a.domains, a.labels_per_domain, a.seed, a.sentences))
