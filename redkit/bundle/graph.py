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

It is traced in two parts, joined into one graph: the encoder (ServingFeatures: every part that reads tokens) and
the head (ServingHead: the modules, on the encoder's outputs). The encoder is the slow part to trace and the part a
change of domains leaves alone, so an export of the same encoder is read back from encoder_cache.py.

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
from redkit.bundle.encoder_cache import cached, encoder_key, forget, keep
from redkit.bundle.manifest import GRAPH, SETTINGS, TOKENIZER
from redkit.errors import RedkitError
from redkit.oos.owner_density import needs_owners, owner_scores
from redkit.oos.scores import MODULE_SCORES


class ServingFeatures(nn.Module):
    """(input_ids, attention_mask) -> (features (B, D),) the run's encoder reads the tokens as, and for a
    nearest-neighbour OOS score the pretrained backbone's features (B, d') too: every part of the graph that reads
    tokens, exported once per encoder and read back after (encoder_cache.py)."""

    def __init__(self, run, pretrained_view: bool):
        super().__init__()
        from redkit.references.linear_probe import frozen_backbone

        self.encoder = run.encoder  # the backbone, or a run of tuned owners' every top (tuned_encoder.py)
        self.pretrained = frozen_backbone(run) if pretrained_view else None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.encoder(input_ids, attention_mask)  # (B, D)
        if self.pretrained is None:
            return (h,)
        return h, self.pretrained(input_ids, attention_mask)  # and (B, d') the pretrained view

    def identity(self) -> dict:
        """What its graph is a function of, besides the code (encoder_cache.encoder_key)."""
        pretrained = self.pretrained.fingerprint() if self.pretrained is not None else None
        return {
            "encoder": type(self.encoder).__name__,
            "fingerprint": self.encoder.fingerprint(),
            "pretrained": pretrained,
        }


class ServingHead(nn.Module):
    """features (B, D)[, pretrained (B, d')] -> probs (B, C), weights (B, K) of `composition` on `run`, and, where
    `oos` ({score, threshold[, stats]}, the run's oos.json entry) is given, that OOS score (B,)."""

    def __init__(self, run, composition: str = "red", oos: dict | None = None):
        super().__init__()
        from redkit.compositions import ModuleSet, compose

        self.composition, self._compose = composition, compose
        self.modules_ = ModuleSet(run)
        d = run.encoder.hidden_size
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
        if self.pretrained_view:
            # The nearest-neighbour scores compare a query with the training texts, in the tuned space and
            # in the pretrained backbone's: both banks travel inside the graph (the pretrained backbone in
            # ServingFeatures).
            from redkit.oos.evaluate import views_of

            views = views_of(run)
            self.register_buffer("bank", views.bank.float())  # (M, d)
            self.register_buffer("bank_domains", views.bank_domains)  # (M,)
            self.register_buffer("pretrained_bank", views.pretrained_bank.float())  # (M, d')

    @property
    def pretrained_view(self) -> bool:
        return self.oos_score is not None and self.oos_score not in MODULE_SCORES

    def forward(self, h: torch.Tensor, f: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        from redkit.oos.evaluate import Views, composition_scores

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
            scores = composition_scores(composed, h, f, views, self.stats, chunk=None)  # symbolic batch: no chunks
        return composed.probs, weights, scores[self.oos_score]


class ServingGraph(nn.Module):
    """(input_ids, attention_mask) -> the head's outputs on the features' outputs: the whole inference path in
    torch, as the run evaluates it, which the exported graph (the two parts joined) is checked against."""

    def __init__(self, run, composition: str = "red", oos: dict | None = None):
        super().__init__()
        self.head = ServingHead(run, composition, oos)
        self.features = ServingFeatures(run, self.head.pretrained_view)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.head(*self.features(input_ids, attention_mask))


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


OPSET = 20
INPUTS = ("input_ids", "attention_mask")
FEATURES = ("features", "pretrained")  # what the encoder part gives the head: (B, D), and (B, d') for a view score
OUTPUTS = ("probs", "weights", "oos_score")


def _export(module: nn.Module, example: tuple, dynamic: tuple, inputs: list[str], outputs: list[str]):
    """`module` traced on `example` by torch.onnx's dynamo exporter: its ONNX IR model (onnx_ir.Model)."""
    # The exporter narrates every pass on stdout and warns about optional packages (torchvision) and
    # renamed axes: none of it concerns a user, whose check is the graph's answers (tests/test_serve.py).
    quiet = contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings()
    with torch.no_grad(), quiet[0], quiet[1], _quiet_logger("torch.onnx"):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module,
            example,
            dynamo=True,
            opset_version=OPSET,
            dynamic_shapes=dynamic,
            input_names=inputs,
            output_names=outputs,
            verbose=False,
        )
    return program.model


def _encoder(features: ServingFeatures, example: dict):
    """(the features' ONNX IR model, whether it was read from the cache): exported and kept where it is not there."""
    import onnx_ir

    key = encoder_key(features.identity(), OPSET)
    path = cached(key)
    if path is not None:
        try:
            return onnx_ir.load(path), True
        except Exception:  # cut short or unreadable (another process's partial copy is never there: atomic)
            forget(key)
    batch, length = torch.export.Dim("batch"), torch.export.Dim("length")
    names = list(FEATURES[: 2 if features.pretrained is not None else 1])
    args = (example["input_ids"], example["attention_mask"])
    model = _export(features, args, ({0: batch, 1: length},) * 2, list(INPUTS), names)
    keep(key, lambda tmp: onnx_ir.save(model, tmp))
    return model, False


def _join(encoder, head):
    """One ONNX IR model: `head`'s nodes after `encoder`'s, each head input fed by the encoder output of its name,
    the head's outputs the model's. The encoder's weights keep their names, the head's are prefixed "head.", and
    any other name the two traces share is made unique (NameFixPass)."""
    from onnx_ir.passes.common import NameFixPass

    produced = {value.name: value for value in encoder.graph.outputs}
    for value in list(head.graph.inputs):
        value.replace_all_uses_with(produced[value.name])
    head.graph.inputs.clear()
    for name in list(head.graph.initializers):
        initializer = head.graph.initializers.pop(name)
        initializer.name = f"head.{name}"
        encoder.graph.register_initializer(initializer)
    nodes = list(head.graph)
    head.graph.remove(nodes, safe=False)
    encoder.graph.extend(nodes)
    outputs = list(head.graph.outputs)
    head.graph.outputs.clear()
    encoder.graph.outputs.clear()
    encoder.graph.outputs.extend(outputs)
    for domain, version in head.opset_imports.items():
        if encoder.opset_imports.setdefault(domain, version) != version:
            raise RedkitError(
                f"the serving graph's parts import {domain!r} at opsets {encoder.opset_imports[domain]} and {version}"
            )
    for key, function in head.functions.items():
        if encoder.functions.setdefault(key, function) is not function:
            raise RedkitError(f"the serving graph's parts both define the ONNX function {key}")
    NameFixPass()(encoder)
    return encoder


def export_serving(run, directory: Path, composition: str = "red", oos: dict | None = None, print_fn=print) -> dict:
    """Write model.onnx, tokenizer.json and serving.json of `run` into `directory`; returns serving.json.
    `oos`: the composition's OOS rule (the run's oos.json entry): the graph then also outputs its score.
    A nearest-neighbour score (knn, knn_domain, knn_pretrained, views) brings the training features
    and, for the pretrained view, the untuned backbone into the graph.

    The graph is traced in two parts and joined: the encoder (ServingFeatures), read from encoder_cache.py where an
    export of the same encoder left it, and the head (ServingHead), traced on the encoder's outputs; the joined
    graph is checked whole against the run's modules (`_check`)."""
    import onnx_ir

    start = time.perf_counter()
    graph = ServingGraph(run, composition, oos).eval()
    example = run.backbone.tokenize(["a first example text", "a second, longer example text of a few words"])
    directory.mkdir(parents=True, exist_ok=True)
    encoder, reused = _encoder(graph.features, example)
    with torch.no_grad():
        features = graph.features(example["input_ids"], example["attention_mask"])  # (B, D)[, (B, d')]
    batch = torch.export.Dim("batch")
    names, outputs = list(FEATURES[: len(features)]), list(OUTPUTS[: 3 if oos else 2])
    head = _export(graph.head, features, tuple({0: batch} for _ in features), names, outputs)
    with atomic_path(directory / GRAPH) as tmp:
        onnx_ir.save(_join(encoder, head), tmp)
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
        "encoder_reused": reused,  # read from the encoder cache (encoder_cache.py), not traced again
    }
    write_json(directory / SETTINGS, settings)
    how = " (its encoder read from the cache)" if reused else ""
    print_fn(f"exported the serving graph ({composition}) in {settings['export_seconds']} s{how}")
    return settings
