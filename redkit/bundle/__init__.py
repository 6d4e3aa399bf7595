"""Slim bundles: a trained run's inference modules + a manifest of their sizes and sha256, opened
by `open_run` (and by `Run` itself) as a read-only run. See export.py and manifest.py."""

from redkit.bundle.export import export_bundle  # noqa: F401
from redkit.bundle.manifest import MANIFEST, is_bundle, verify_bundle  # noqa: F401
