"""`redkit fit --data DIR --out RUN`: every stage of RED and its baselines on your labelled text."""

import argparse
from pathlib import Path

from redkit.cli.command import command
from redkit.cli.options import eval_option, model_options, parse_router_options, router_option, router_settings


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, type=Path, help="directory of train.jsonl|csv (+ optional val, test)")
    p.add_argument("--out", required=True, type=Path, help="the run directory")
    p.add_argument("--text-field", default="text")
    p.add_argument("--label-field", default="label")
    p.add_argument("--domain-field", default="domain")
    p.add_argument(
        "--val-fraction", type=float, default=0.1, help="of each domain's train held out when there is no val file"
    )
    p.add_argument(
        "--oos",
        type=Path,
        default=None,
        help="out-of-scope validation texts (JSONL/CSV): record an OOS threshold; predict then says 'out of scope'",
    )
    p.add_argument(
        "--skip-invalid",
        action="store_true",
        help="leave out records with an empty text, label or domain (counted in the report) instead of refusing the file",
    )
    fit_model_options(p)


def fit_model_options(p: argparse.ArgumentParser) -> None:
    """The model and stage flags of a fit run (`redkit fit`, `redkit reproduce clinc150`)."""
    p.add_argument(
        "--base-fraction",
        type=float,
        default=1.0,
        help="of train, stratified by domain, for stage base (default 1.0, chosen on CLINC150's val by "
        "`redkit study levers`; the paper's recipe is 0.1)",
    )
    p.add_argument(
        "--recipe",
        choices=("pooled", "replay-free"),
        default="pooled",
        help="pooled (default): stage base tunes the top layers and classifier on every domain's training data; "
        "replay-free: every domain's modules from its own data alone, the pretrained backbone untouched, the "
        "router built from each domain's statistics (what `redkit federate`'s owners and add-domain build)",
    )
    p.add_argument(
        "--owner-experts",
        choices=("residual", "tuned"),
        default="residual",
        help="with --recipe replay-free, what each domain's owner trains: residual (default) experts on the frozen "
        "features, or tuned: its own copy of the backbone's top layers (--trainable-layers, default 2) and rows, "
        "routed by the ridge from the owners' statistics (the study's red_tuned)",
    )
    p.add_argument(
        "--references",
        nargs="*",
        default=None,
        choices=("joint", "linear_probe"),
        help="non-modular references trained and scored beside RED (default both, none with --recipe replay-free; "
        "joint fine-tunes on all of train)",
    )
    eval_option(p)
    model_options(p)
    p.set_defaults(trainable_layers="auto")
    p.add_argument(
        "--max-length",
        type=int,
        default=None,
        help="tokens per text, longer ones cut (default: the fewest covering 99%% of the training texts, "
        "at most the backbone's limit)",
    )
    router_option(p)
    p.set_defaults(router=None)  # dense, or gaussian with --recipe replay-free (redkit.api.fit_setup)
    router_settings(p, "dense hidden=1024; labels source=classifier, temperature=0.5")


def fit_kwargs(args) -> dict:
    """The API's keyword arguments of the flags `fit_model_options` adds."""
    return dict(
        backbone=args.backbone,
        pooling=args.pooling,
        trainable_layers=args.trainable_layers,
        max_length=args.max_length,
        rank=args.rank,
        device=args.device,
        precision=args.precision,
        seed=args.seed,
        base_fraction=args.base_fraction,
        router=args.router,
        router_loss=args.router_loss,
        max_epochs=args.max_epochs,
        eval_files=args.eval_files,
        references=None if args.references is None else tuple(args.references),
        router_options=parse_router_options(args.router_options),
        recipe=args.recipe,
        owner_experts=args.owner_experts,
    )


@command("fit", options=_options, help="train RED and its baselines on your own labelled text with domains")
def run(args) -> None:
    from redkit.api import fit

    fit(
        args.data,
        args.out,
        text_field=args.text_field,
        label_field=args.label_field,
        domain_field=args.domain_field,
        val_fraction=args.val_fraction,
        oos=args.oos,
        skip_invalid=args.skip_invalid,
        **fit_kwargs(args),
    )
