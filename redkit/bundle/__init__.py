"""Slim bundles: a trained run's inference modules, its serving graph and a manifest of their sizes
and sha256, opened by `open_run` (and by `Run` itself) as a read-only run. See export.py and
manifest.py. Nothing is imported here: reading a manifest (manifest.py) must not import torch,
since `redkit serve` and `redkit predict` on a bundle never do."""
