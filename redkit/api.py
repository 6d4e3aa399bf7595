"""The Python API, for notebooks and scripts; the CLI's fit, eval and predict are thin layers over it.

run = redkit.fit("data/mine", out="runs/mine")          # train every stage on your labelled text
run = redkit.load("runs/mine")                           # any fit, task1/task2 or steps run
run.predict(["my card was charged twice"])               # [Prediction(label, probability, weights)]
run.evaluate("data/mine/test.jsonl")                     # {composition: metrics}
"""

from collections.abc import Sequence
from pathlib import Path

from redkit.errors import RedkitError
from redkit.prediction import Prediction


class FittedRun:
    """A trained run opened for use: its classes, domains, predictions and evaluation."""

    def __init__(self, run):
        self.run = run

    def __repr__(self) -> str:
        return f"FittedRun({str(self.run.dir)!r}, {len(self.labels)} labels, domains {list(self.domains)})"

    @property
    def path(self) -> Path:
        return self.run.dir

    @property
    def labels(self) -> tuple:
        space = self.run.space
        return space.labels or tuple(space.value_of(c) for c in range(space.num_classes))

    @property
    def domains(self) -> tuple[str, ...]:
        return self.run.space.domains

    def label_details(self, label) -> dict:
        """What the run's kind says of a label beside its name (Task 1/2: the answer's range)."""
        return self.run.label_details(label)

    def _label(self, cls: int):
        value = self.run.space.value_of(cls)
        return int(value) if getattr(self.run.config, "numeric_labels", True) else value

    def predict(self, texts: Sequence[str] | str, composition: str = "red") -> list[Prediction]:
        """Per text the predicted label, its probability and the expert weights (by domain)."""
        import torch

        from redkit.compositions import COMPOSITIONS, ModuleSet, compose
        from redkit.features import encode

        COMPOSITIONS[composition]  # an unknown name fails before any work
        texts = [texts] if isinstance(texts, str) else list(texts)
        own = self.run.predict_texts(texts, composition)  # a kind that answers otherwise (steps)
        if own is not None:
            return own
        modules = ModuleSet(self.run)
        h = encode(self.run.encoder, texts).to(self.run.device)  # (N, d); a run of tuned owners' (N, 2d + K d)
        with torch.no_grad():
            alpha_router = modules.router().route(h).probs  # (N, K) the router's full distribution
        # The router's top domain stands in for the true one that the oracle compositions take.
        composed = compose(composition, modules, h, alpha_router.argmax(dim=-1))
        weights = composed.weights if composed.weights is not None else alpha_router
        probs = composed.probs.cpu()
        rejected = self._out_of_scope(composition, composed, h, texts, modules)
        return [
            Prediction(
                self._label(int(p.argmax())),
                float(p.max()),
                dict(zip(self.domains, map(float, w))),
                out_of_scope=None if rejected is None else bool(r),
            )
            for p, w, r in zip(probs, weights.cpu(), rejected if rejected is not None else [None] * len(probs))
        ]

    def _out_of_scope(self, composition: str, composed, h, texts: list[str], modules):
        """(N,) bool: below the composition's OOS threshold (`<run>/oos.json`, chosen on val +
        OOS validation texts by `redkit fit --oos`), or None where the run has none for it."""
        from redkit.jsonfile import read_json
        from redkit.oos.evaluate import OOS_FILE, composition_scores, views_of
        from redkit.references.linear_probe import frozen_backbone

        path = Path(self.run.dir) / OOS_FILE
        chosen = read_json(path, "an OOS threshold file").get(composition) if path.is_file() else None
        if chosen is None:
            return None
        from redkit.oos.owner_density import needs_owners
        from redkit.oos.scores import MODULE_SCORES

        stats = {name: tuple(value) for name, value in chosen.get("stats", {}).items()} or None
        if chosen["score"] in MODULE_SCORES:  # from the run's modules alone
            owners = modules if needs_owners(chosen["score"]) else None
            score = composition_scores(composed, h, None, None, stats, modules=owners)[chosen["score"]]
        else:
            from redkit.features import encode

            pretrained = encode(frozen_backbone(self.run), texts).to(h.device)
            score = composition_scores(composed, h, pretrained, views_of(self.run), stats)[chosen["score"]]
        return (score < chosen["threshold"]).cpu().tolist()

    def red_model(self, kind: str = "residual"):
        """The run's RED model (redkit.REDModel: C, its `kind` experts and router), with a model card:
        `save_pretrained(DIR)` writes it, `REDModel.from_pretrained(DIR)` reads it back."""
        from redkit.run.red import red_model

        return red_model(self.run, kind)

    def sequence_classifier(self, red=None):
        """The run's tuned backbone, tokenizer and pooling around its RED model (or `red`, one loaded
        with from_pretrained): takes `input_ids`, `attention_mask` (`tokenize(texts)`), and `labels`."""
        from redkit.run.red import sequence_classifier

        return sequence_classifier(self.run, red)

    def compositions(self) -> tuple[list[str], list[str]]:
        """(the compositions this run can evaluate by default, those it cannot): every one, except
        that a bundle exported without heads lacks the modules of moe, oracle, the global heads..., and
        a run assembled from owners' contributions (redkit/federated) has no global head (nobody's data
        pooled to train it)."""
        from redkit.compositions import ModuleSet, available_compositions

        default = self.run.default_compositions()
        if getattr(self.run, "bundle", None) is None and not getattr(self.run, "assembled", False):
            return default, []  # a run's missing module is an unfinished stage: evaluating says which
        return available_compositions(ModuleSet(self.run), default)

    def evaluate(self, path: str | Path, compositions: Sequence[str] | None = None) -> dict:
        """Metrics of every composition (or those named) on a file: {composition: metrics}. A fit
        run's file needs text and label (its domain only for the oracle compositions); a label
        never seen in training counts as wrong, and each composition's `unseen_labels` counts them.
        A steps run decomposes and executes the file's questions (evaluate_questions' result)."""
        from redkit.compositions import COMPOSITIONS

        names = list(compositions or self.compositions()[0])
        for name in names:
            COMPOSITIONS[name]  # unknown names fail before any work
        own = self.run.evaluate_file(Path(path), names)  # a kind that evaluates otherwise (steps)
        if own is not None:
            return own
        from redkit.compositions import ModuleSet
        from redkit.evaluate import evaluate_file

        return evaluate_file(self.run, ModuleSet(self.run), Path(path), names)


def load(path: str | Path) -> FittedRun:
    """Open a trained fit, task1/task2 or steps run (a digits run takes images, not text)."""
    from redkit.plugins import load_plugins
    from redkit.run import open_run

    load_plugins()
    run = open_run(Path(path))
    if not hasattr(run, "backbone") or not hasattr(run, "text_features"):
        raise RedkitError(
            f"{path} is a {run.config.task} run: it does not take text (it is evaluated by its own benchmark)"
        )
    return FittedRun(run)


def check_router_options(router: str, options: dict) -> None:
    """Each option must be a field of the router's config (one line naming the known ones), of its type and within
    its range (one line naming the option), over the defaults the router is built with: a training-free router's
    `from_run` has its own (the Gaussian's ridge ρ, where its config's default 0 reads a router saved before the
    ridge), so `routes_by=ridge` alone is the ridge at its default ρ, as the run builds it."""
    import inspect
    from dataclasses import fields

    from redkit.config_types import check_config_types
    from redkit.modules.layers import ROUTERS

    cls = ROUTERS[router]
    known = {f.name for f in fields(cls.Config)} - {"dim", "num_experts", "num_classes"}
    for key in options:
        if key not in known:
            raise RedkitError(
                f"--router-option {key}: router {router!r} has no such setting (known: {', '.join(sorted(known))})"
            )
    built = inspect.signature(cls.from_run).parameters.values() if cls.training_free else ()
    defaults = {p.name: p.default for p in built if p.name in known and p.default is not inspect.Parameter.empty}
    try:  # its values too, as the config will be built (the widths are the run's: stand-ins here)
        config = cls.Config(dim=1, num_experts=2, **(defaults | options))
    except (TypeError, ValueError) as err:
        raise RedkitError(f"--router-option: router {router!r}: {str(err).splitlines()[0]}") from None
    check_config_types(config, f"--router-option of router {router!r}")


def fit_setup(
    data_dir: str | Path,
    *,
    text_field: str = "text",
    label_field: str = "label",
    domain_field: str = "domain",
    backbone: str | Path | None = None,
    pooling: str = "mean",
    trainable_layers: int | str = "auto",
    max_length: int | None = None,
    rank: int = 0,
    device: str = "cpu",
    precision: str = "fp32",
    seed: int = 0,
    base_fraction: float = 1.0,
    val_fraction: float = 0.1,
    router: str | None = None,
    router_loss: str = "domain",
    max_epochs: int | None = None,
    oos: str | Path | None = None,
    data_format: str = "files",
    references: Sequence[str] | None = None,
    router_options: dict | None = None,
    skip_invalid: bool = False,
    recipe: str = "pooled",
    owner_experts: str = "residual",
):
    """(FitConfig, FitData): DATA_DIR read and checked, and what is `auto` settled from its training
    texts (redkit/fitting/recipe.py), before anything is written. `fit` trains from these.

    `recipe` "replay-free" (redkit/fitting/replay_free.py): every stage reads one domain's data at a time; its
    router is `gaussian` (None: that; a router trained on every domain is refused), it has no reference, each
    label belongs to one domain, and max_length is fixed (None: replay_free.MAX_LENGTH), not settled from every
    domain's texts. `router` None: dense for the pooled recipe; `references` None: both for the pooled one.
    `owner_experts` "tuned" (replay-free only): each owner tunes its own top layers (`trainable_layers`, "auto": 2)
    and the router reads the frozen layers' states too and routes by the ridge (redkit/fitting/tuned_owners.py)."""
    from redkit.backbone import BackboneConfig
    from redkit.backbone.locate import check_model_dir, default_backbone_path, length_limit, num_layers
    from redkit.backbone.model import token_lengths
    from redkit.fitting import replay_free
    from redkit.fitting.config import FitConfig
    from redkit.fitting.data import label_domains, load_run_data
    from redkit.fitting.recipe import settle
    from redkit.fitting.records import Fields
    from redkit.modules.layers import ROUTERS

    if recipe not in replay_free.RECIPES:
        raise RedkitError(f"--recipe {recipe!r}: expected one of {', '.join(replay_free.RECIPES)}")
    if owner_experts not in replay_free.OWNER_EXPERTS:
        raise RedkitError(f"--owner-experts {owner_experts!r}: expected one of {', '.join(replay_free.OWNER_EXPERTS)}")
    no_pooling = recipe == replay_free.REPLAY_FREE
    tuned = owner_experts == replay_free.TUNED
    if tuned and not no_pooling:
        raise RedkitError("--owner-experts tuned: the owners of the replay-free recipe (add --recipe replay-free)")
    if tuned:  # the study's red_tuned router: r = [h, lower] at M 4,096, routed by the ridge (options may override)
        router_options = replay_free.TUNED_ROUTER_OPTIONS | dict(router_options or {})
    router = router or ("gaussian" if no_pooling else "dense")
    references = tuple(() if no_pooling else ("joint", "linear_probe")) if references is None else tuple(references)
    ROUTERS[router]  # an unknown router or reference fails (did you mean) before anything is written
    from redkit.references import REFERENCES

    for reference in references:
        REFERENCES[reference]
    if no_pooling and not ROUTERS[router].replay_free:
        raise RedkitError(
            f"--router {router}: trained on every domain's data; the replay-free recipe builds its router from each "
            "domain's statistics (--router gaussian)"
        )
    if no_pooling and references:
        raise RedkitError(
            f"--references {' '.join(references)}: a reference trains on every domain's pooled data; the replay-free "
            "recipe has none (fit the pooled recipe beside it to compare)"
        )
    check_router_options(router, router_options or {})
    if not 0 < base_fraction <= 1 or not 0 < val_fraction < 1:
        raise RedkitError(f"base fraction {base_fraction} must lie in (0, 1] and val fraction {val_fraction} in (0, 1)")
    if backbone:
        check_model_dir(Path(backbone))
    model_dir = Path(backbone).resolve() if backbone else default_backbone_path()
    layers = _trainable_layers(trainable_layers, num_layers(model_dir))
    if max_length is not None and not 1 <= max_length <= length_limit(model_dir):
        raise RedkitError(f"--max-length {max_length}: must be in 1..{length_limit(model_dir)} for {model_dir.name}")
    data_dir = Path(data_dir).resolve()
    oos = Path(oos).resolve() if oos else None
    data = load_run_data(
        data_dir,
        data_format,
        Fields(text_field, label_field, domain_field),
        seed,
        val_fraction,
        oos,
        skip_invalid=skip_invalid,
    )
    texts = [r.question for r in data.splits["train"]]
    rows: dict[str, tuple[str, ...]] = {}  # each domain's own labels (the replay-free recipe's label rows)
    if no_pooling:  # nothing read across domains: a fixed length; the host's top is the pretrained one
        max_length = max_length or min(replay_free.MAX_LENGTH, length_limit(model_dir))
        rows = replay_free.own_label_rows(data.labels, label_domains(data), str(data_dir))
        # the residual owners tune no layer (1: the pretrained top served as is); tuned ones their top layers
        layers = (layers or replay_free.TUNED_LAYERS) if tuned else 1
        if tuned and layers == num_layers(model_dir):
            raise RedkitError(
                f"--trainable-layers {layers}: the tuned owners' router reads the frozen layers' states; "
                "leave at least one layer frozen"
            )
    lengths = [] if no_pooling else token_lengths(model_dir, texts)
    settled = settle(lengths, num_layers(model_dir), length_limit(model_dir), max_length, layers)
    data.notes.append(
        f"replay-free recipe: max_length {max_length} tokens, the pretrained backbone untouched, every domain's "
        "modules from its own data alone" + (f" (each owner tunes its own top {layers} layers)" if tuned else "")
        if no_pooling
        else settled.line(len(texts))
    )
    config = FitConfig(
        seed=seed,
        expert_rank=rank,
        device=device,
        router=router,
        router_loss=router_loss,
        data_dir=str(data_dir),
        data_format=data_format,
        oos_file=str(oos) if oos else None,
        text_field=text_field,
        label_field=label_field,
        domain_field=domain_field,
        val_fraction=val_fraction,
        labels=data.labels,
        numeric_labels=data.numeric_labels,
        domains=data.domains,
        label_domains=label_domains(data),
        skip_invalid=skip_invalid,
        backbone=BackboneConfig(
            path=str(Path(backbone).resolve()) if backbone else None,
            pooling=pooling,
            trainable_layers=settled.trainable_layers,
            precision=precision,
            max_length=settled.max_length,
        ),
        base_fraction=base_fraction,
        references=references,
        router_options=dict(router_options or {}),
        recipe=recipe,
        owner_experts=owner_experts,
        label_rows=rows,
    )
    for stage in ("base", "joint"):
        config.stage_overrides[stage]["max_epochs"] = settled.epochs
    config.cap_epochs(max_epochs)
    return config, data


def _trainable_layers(value: int | str, total: int) -> int | None:
    """`--trainable-layers`: N, "all" (every layer) or "auto" (None: settled from the data)."""
    if value == "auto":
        return None
    if value == "all":
        return total
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= total:
        raise RedkitError(f"--trainable-layers {value!r}: expected 1..{total}, 'all' or 'auto'")
    return value


def fit(
    data_dir: str | Path, out: str | Path, *, eval_files: Sequence[str | Path] = (), print_fn=print, **settings
) -> FittedRun:
    """Train every stage of RED and its baselines on DATA_DIR's train (val, test) files into OUT.
    Everything is read and checked before anything is written: a bad line, field or option is one
    RedkitError and leaves OUT as it was. Rerunning resumes; finished stages are never redone.

    `settings` are `fit_setup`'s: text_field, label_field, domain_field; backbone, pooling,
    trainable_layers (N, "all" or "auto"), max_length (None: auto), rank, device, precision, seed;
    base_fraction, val_fraction, router, router_options, router_loss, references, max_epochs (a cap, for quick
    looks); `oos`: a file of out-of-scope texts (the run then records an OOS threshold per
    composition, chosen on val + these, and `predict` answers "out of scope" under it);
    `data_format` "clinc150": DATA_DIR holds CLINC150's data_full.json and domains.json, OOS splits
    included; `skip_invalid`: drop records with an empty text (counted in the report) instead of
    refusing the file."""
    from redkit.fitting.run import FitRun
    from redkit.pipeline import run_pipeline

    config, data = fit_setup(data_dir, **settings)
    print_fn(f"[data] {data.notes[-1]}")
    run = FitRun(Path(out), config)
    # What was done unasked (val carved, no test, auto settings) is recorded in splits.json and said in the report.
    run_pipeline(run, tuple(Path(p) for p in eval_files), print_fn, summary=run.prepare_data(data))
    return FittedRun(run)
