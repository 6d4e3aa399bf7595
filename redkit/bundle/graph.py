"""A run's whole inference path as one ONNX graph, for serving without the training stack.

    input_ids, attention_mask (B, T) ─► backbone (frozen prefix + tuned top) ─► pooled h (B, d)
                                        (a run of tuned owners: r and every owner's top, (B, 2d + K d))
                                     ─► router α (B, K) ─► composition ─► probs (B, C), weights (B, K)
                                     [─► the run's OOS score (B,): of the output, the owners' densities and the
                                         router's ridge (redkit/oos/owner_density.py), or the training texts']

The graph wraps the very modules the run evaluates with (`Backbone.forward`, `ModuleSet`,
`compose`), so there is no second copy of RED's forward to keep in step: what the bundle answers is
what `redkit eval` computes, up to float rounding (tests/test_serve.py checks 1e-5). The tokenizer
travels as `tokenizer.json` (Hugging Face `tokenizers`) with the run's truncation and padding set,
so the server needs neither transformers nor torch.

    serving/model.onnx       the graph (dynamic batch and length; opset 20, torch.onnx's dynamo exporter)
    serving/tokenizer.json   the backbone's fast tokenizer, truncating at the run's max_length, padding to the longest
    serving/serving.json     labels, domains, composition, max_length, the backbone fingerprint, the OOS rule
"""

import contextlib
import io
import logging
import time
import warnings
from pathlib import Path

import torch
from torch import nn

from redkit.atomic import atomic_path, write_json
from redkit.bundle.manifest import GRAPH, SETTINGS, TOKENIZER
from redkit.errors import RedkitError
from redkit.oos.owner_density import needs_owners, owner_scores
from redkit.oos.scores import MODULE_SCORES


class ServingGraph(nn.Module):
    """(input_ids, attention_mask) -> probs (B, C), weights (B, K) of `composition` on `run`, and, where
    `oos` ({score, threshold[, stats]}, the run's oos.json entry) is given, that OOS score (B,)."""

    def __init__(self, run, composition: str = "red", oos: dict | None = None):
        super().__init__()
        from redkit.compositions import ModuleSet, compose

        self.run, self.composition, self._compose = run, composition, compose
        self.backbone = run.encoder  # the backbone, or a run of tuned owners' every top (tuned_encoder.py)
        self.modules_ = ModuleSet(run)
        d = self.backbone.hidden_size
        # Load every module the composition uses now (ModuleSet loads lazily), and hold them as
        # submodules so that the exporter sees their weights as parameters.
        self.router = self.modules_.router()
        compose(composition, self.modules_, torch.zeros(1, d), torch.zeros(1, dtype=torch.long))
        self.oos_score = oos["score"] if oos else None
        self.owners = self.modules_ if self.oos_score and needs_owners(self.oos_score) else None
        if self.owners is not None:  # the owners' densities and the router's ridge, loaded now to be held
            owner_scores(self.modules_, torch.zeros(1, d), torch.ones(1, run.space.num_domains))
        self.held = nn.ModuleList(self.modules_._loaded.values())
        self.stats = {name: tuple(v) for name, v in (oos or {}).get("stats", {}).items()} or None
        if self.oos_score is not None and self.oos_score not in MODULE_SCORES:
            # The nearest-neighbour scores compare a query with the training texts, in the tuned space and
            # in the pretrained backbone's: both banks and the pretrained backbone travel inside the graph.
            from redkit.oos.evaluate import views_of
            from redkit.references.linear_probe import frozen_backbone

            views = views_of(run)
            self.pretrained = frozen_backbone(run)
            self.register_buffer("bank", views.bank.float())  # (M, d)
            self.register_buffer("bank_domains", views.bank_domains)  # (M,)
            self.register_buffer("pretrained_bank", views.pretrained_bank.float())  # (M, d')

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        from redkit.oos.evaluate import Views, composition_scores

        h = self.backbone(input_ids, attention_mask)  # (B, d)
        alpha = self.router.route(h).probs  # (B, K)
        # The router's top domain stands in for the true one (as FittedRun.predict does).
        composed = self._compose(self.composition, self.modules_, h, alpha.argmax(dim=-1))
        weights = composed.weights if composed.weights is not None else alpha
        if self.oos_score is None:
            return composed.probs, weights
        if self.oos_score in MODULE_SCORES:  # the same function FittedRun.predict and the OOS evaluation score with
            scores = composition_scores(composed, h, None, None, self.stats, modules=self.owners)
        else:
            views = Views(self.bank, self.bank_domains, self.pretrained_bank)
            f = self.pretrained(input_ids, attention_mask)  # (B, d') the pretrained view
            scores = composition_scores(composed, h, f, views, self.stats, chunk=None)  # symbolic batch: no chunks
        return composed.probs, weights, scores[self.oos_score]


CHECK_TEXTS = ["one", "a second text, of another length", "and a third: batch 3, not the example's 2"]


def _check(graph: ServingGraph, path: Path, backbone) -> None:
    """The exported graph, run by ONNX Runtime on another batch size and length than the example it was
    traced with, answers as the module does: a dimension the exporter fixed, or an operator it
    translated wrongly, is an error here rather than a served model that fails or errs later."""
    import onnxruntime

    enc = backbone.tokenize(CHECK_TEXTS)
    with torch.no_grad():
        want = [t.numpy() for t in graph(enc["input_ids"], enc["attention_mask"])]
    try:
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        got = session.run(
            None, {"input_ids": enc["input_ids"].numpy(), "attention_mask": enc["attention_mask"].numpy()}
        )
    except Exception as err:  # onnxruntime's own errors: a fixed dimension, an unsupported operator
        raise RedkitError(
            f"the exported serving graph does not run on a batch of 3: {str(err).splitlines()[0]}"
        ) from None
    worst = max(float(abs(g - w).max()) for g, w in zip(got, want))
    if worst > 1e-4:
        raise RedkitError(f"the exported serving graph differs from the run by {worst:.2e} (more than 1e-4)")


@contextlib.contextmanager
def _quiet_logger(name: str):
    logger = logging.getLogger(name)
    level, logger.level = logger.level, logging.ERROR
    try:
        yield
    finally:
        logger.setLevel(level)


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
    `oos`: the composition's OOS rule (the run's oos.json entry): the graph then also outputs its score.
    A nearest-neighbour score (knn, knn_domain, knn_pretrained, views) brings the training features
    and, for the pretrained view, the untuned backbone into the graph."""
    start = time.perf_counter()
    graph = ServingGraph(run, composition, oos).eval()
    example = run.backbone.tokenize(["a first example text", "a second, longer example text of a few words"])
    batch, length = torch.export.Dim("batch"), torch.export.Dim("length")
    directory.mkdir(parents=True, exist_ok=True)
    # The exporter narrates every pass on stdout and warns about optional packages (torchvision) and
    # renamed axes: none of it concerns a user, whose check is the graph's answers (tests/test_serve.py).
    quiet = contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings()
    with torch.no_grad(), quiet[0], quiet[1], _quiet_logger("torch.onnx"):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            graph,
            (example["input_ids"], example["attention_mask"]),
            dynamo=True,
            opset_version=20,
            dynamic_shapes=({0: batch, 1: length}, {0: batch, 1: length}),
            input_names=["input_ids", "attention_mask"],
            output_names=["probs", "weights"] + (["oos_score"] if oos else []),
            verbose=False,
        )
    with atomic_path(directory / GRAPH) as tmp:
        program.save(str(tmp))
        _check(graph, tmp, run.backbone)
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
