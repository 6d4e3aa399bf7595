"""What answers a batch of texts at serving time: the bundle's graph under ONNX Runtime.

Imports numpy, onnxruntime and tokenizers only (never torch, transformers or scikit-learn), so
that `redkit serve` and `redkit predict --bundle` start in well under a second of imports. Every
file is read from the bundle only after its manifest has vouched for it (size and sha256).

A predictor never changes: a domain added or removed at serving time is a new predictor, built
beside the old one and swapped in whole (redkit/serve/state.py), so a batch is answered by one model.
"""

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from redkit.bundle.manifest import GRAPH, SERVING, SETTINGS, TOKENIZER, verify_bundle
from redkit.errors import RedkitError


@dataclass(frozen=True)
class BundlePredictor:
    """`BundlePredictor.open(BUNDLE).predict(texts)` -> one dict per text (label, probability,
    weights by domain, out_of_scope)."""

    directory: Path
    settings: dict
    session: object = field(repr=False)
    tokenizer: object = field(repr=False)
    manifest: dict = field(repr=False, default_factory=dict)  # as verified when opened
    source_run: Path | None = None  # the run behind it, where one is served (a domain can then be added)
    version: int = 1

    @classmethod
    def open(cls, bundle: str | Path, source_run: Path | None = None, version: int = 1, threads: int | None = None):
        import onnxruntime
        from tokenizers import Tokenizer

        bundle = Path(bundle)
        # Every listed file present and intact, nothing unlisted where modules load from: a damaged bundle
        # is refused whole, as `redkit eval` refuses it, never served with one part altered.
        manifest = verify_bundle(bundle)
        names = [f"{SERVING}/{name}" for name in (GRAPH, TOKENIZER, SETTINGS)]
        missing = [n for n in names if n not in manifest["files"]]
        if missing:
            raise RedkitError(
                f"{bundle}: no serving graph in this bundle ({missing[0]} is not in its manifest); "
                "export it again with this redkit (`redkit export --run RUN --out BUNDLE`)"
            )
        settings = json.loads((bundle / SERVING / SETTINGS).read_text())
        options = onnxruntime.SessionOptions()
        # "basic" graph optimisations measured fastest for this encoder on CPU; threads: all cores by default.
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.intra_op_num_threads = threads or os.cpu_count() or 1
        session = onnxruntime.InferenceSession(
            str(bundle / SERVING / GRAPH), options, providers=["CPUExecutionProvider"]
        )
        tokenizer = Tokenizer.from_file(str(bundle / SERVING / TOKENIZER))
        return cls(bundle, settings, session, tokenizer, manifest, source_run, version)

    @property
    def labels(self) -> list:
        return self.settings["labels"]

    @property
    def domains(self) -> list[str]:
        return self.settings["domains"]

    def outputs(self, texts: list[str]) -> list[np.ndarray]:
        """probs (B, C), weights (B, K) of the bundle's composition, and its OOS score (B,) where it has a rule."""
        encodings = self.tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)  # (B, T), padded to the longest
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        return self.session.run(None, {"input_ids": ids, "attention_mask": mask})

    def predict(self, texts: list[str]) -> list[dict]:
        probs, weights, *score = self.outputs(texts)
        rule = self.settings.get("oos")
        rejected = (score[0] < rule["threshold"]).tolist() if rule and score else [None] * len(texts)
        best = probs.argmax(axis=1)
        return [
            {
                "label": self.labels[c],
                "probability": float(p[c]),
                "weights": dict(zip(self.domains, map(float, w))),
                "out_of_scope": r,
            }
            for c, p, w, r in zip(best.tolist(), probs, weights, rejected)
        ]

    def info(self) -> dict:
        manifest = self.manifest
        return {
            "bundle": str(self.directory),
            "run": manifest.get("source", {}).get("run"),
            "kind": manifest.get("kind"),
            "composition": self.settings["composition"],
            "labels": self.labels,
            "domains": self.domains,
            "fingerprint": self.settings["fingerprint"],
            "out_of_scope": self.settings.get("oos"),
            "redkit_version": manifest.get("redkit_version"),
            "version": self.version,
        }
