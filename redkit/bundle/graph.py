"""A run's whole inference path as one ONNX graph, for serving without the training stack.

    input_ids, attention_mask (B, T) ─► backbone (frozen prefix + tuned top) ─► pooled h (B, d)
                                     ─► router α (B, K) ─► composition ─► probs (B, C), weights (B, K)

The graph wraps the very modules the run evaluates with (`Backbone.forward`, `ModuleSet`,
`compose`), so there is no second copy of RED's forward to keep in step: what the bundle answers is
what `redkit eval` computes, up to float rounding (tests/test_serve.py checks 1e-5). The tokenizer
travels as `tokenizer.json` (Hugging Face `tokenizers`) with the run's truncation and padding set,
so the server needs neither transformers nor torch.

    serving/model.onnx       the graph (dynamic batch and length; opset 20, torch.onnx's dynamo exporter)
    serving/tokenizer.json   the backbone's fast tokenizer, truncating at the run's max_length, padding to the longest
    serving/serving.json     labels, domains, composition, max_length, the backbone fingerprint, the OOS rule
"""

import time
from pathlib import Path

import torch
from torch import nn

from redkit.atomic import atomic_path, write_json
from redkit.bundle.manifest import GRAPH, SETTINGS, TOKENIZER
from redkit.errors import RedkitError


class ServingGraph(nn.Module):
    """(input_ids, attention_mask) -> (probs (B, C), weights (B, K)) of `composition` on `run`."""

    def __init__(self, run, composition: str = "red"):
        super().__init__()
        from redkit.compositions import ModuleSet, compose

        self.run, self.composition, self._compose = run, composition, compose
        self.backbone = run.backbone
        self.modules_ = ModuleSet(run)
        d = run.backbone.hidden_size
        # Load every module the composition uses now (ModuleSet loads lazily), and hold them as
        # submodules so that the exporter sees their weights as parameters.
        self.router = self.modules_.router()
        compose(composition, self.modules_, torch.zeros(1, d), torch.zeros(1, dtype=torch.long))
        self.held = nn.ModuleList(self.modules_._loaded.values())

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.backbone(input_ids, attention_mask)  # (B, d)
        alpha = self.router.route(h).probs  # (B, K)
        # The router's top domain stands in for the true one (as FittedRun.predict does).
        composed = self._compose(self.composition, self.modules_, h, alpha.argmax(dim=-1))
        return composed.probs, composed.weights if composed.weights is not None else alpha


def _tokenizer_json(backbone) -> str:
    """The backbone's fast tokenizer as `tokenizers` JSON, truncating and padding as Backbone.tokenize does."""
    from tokenizers import Tokenizer

    backend = getattr(backbone.tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise RedkitError(f"{backbone.path}: the backbone has no fast tokenizer (tokenizer.json) to serve with")
    tokenizer = Tokenizer.from_str(backend.to_str())
    tokenizer.enable_truncation(backbone.config.max_length)
    tokenizer.enable_padding(pad_id=backbone.tokenizer.pad_token_id, pad_token=backbone.tokenizer.pad_token)
    return tokenizer.to_str()


def export_serving(run, directory: Path, composition: str = "red", oos: dict | None = None, print_fn=print) -> dict:
    """Write model.onnx, tokenizer.json and serving.json of `run` into `directory`; returns serving.json.
    `oos`: the composition's OOS rule ({score, threshold}) where its score comes from the graph's
    outputs alone (msp, router, product: redkit/bundle/export.py decides)."""
    start = time.perf_counter()
    graph = ServingGraph(run, composition).eval()
    example = run.backbone.tokenize(["a first example text", "a second, longer example text of a few words"])
    batch, length = torch.export.Dim("batch"), torch.export.Dim("length")
    directory.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        program = torch.onnx.export(
            graph,
            (example["input_ids"], example["attention_mask"]),
            dynamo=True,
            opset_version=20,
            dynamic_shapes=({0: batch, 1: length}, {0: batch, 1: length}),
            input_names=["input_ids", "attention_mask"],
            output_names=["probs", "weights"],
            verbose=False,
        )
    with atomic_path(directory / GRAPH) as tmp:
        program.save(str(tmp))
    with atomic_path(directory / TOKENIZER) as tmp:
        tmp.write_text(_tokenizer_json(run.backbone))
    space = run.space
    labels = list(space.labels) if space.labels else [int(space.value_of(c)) for c in range(space.num_classes)]
    settings = {
        "format": 1,
        "composition": composition,
        "labels": labels,
        # What the run's kind says of each label beside its name (Task 1/2: the answer's range), for predict.
        "label_details": {str(label): run.label_details(label) for label in labels},
        "domains": list(space.domains),
        "max_length": run.backbone.config.max_length,
        "fingerprint": run.fingerprint,  # the tuned backbone's: what every module and expert is checked against
        "oos": {"score": oos["score"], "threshold": float(oos["threshold"])} if oos else None,
        "export_seconds": round(time.perf_counter() - start, 1),
    }
    write_json(directory / SETTINGS, settings)
    print_fn(f"exported the serving graph ({composition}) in {settings['export_seconds']} s")
    return settings
