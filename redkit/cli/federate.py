"""`redkit federate --data DIR --out RUN [--runtime simulation|deployment] [--rounds R]`: data owners, one
domain each, assemble a RED model over Flower, beside Flower's FedAvg, FedProx or FedAdam (redkit/federated)."""

import argparse
from pathlib import Path

from redkit.cli.command import command
from redkit.cli.options import parse_router_options, router_settings


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data", type=Path, default=Path("data/clinc150"), help="fit-format data or CLINC150 (default data/clinc150)"
    )
    p.add_argument("--out", required=True, type=Path, help="the federation's directory (RUN/model is the run)")
    p.add_argument("--runtime", default="simulation", choices=("simulation", "deployment"))
    p.add_argument("--rounds", type=int, default=10, help="the iterative baseline's rounds, at most (0: RED alone)")
    baseline = p.add_argument_group("the iterative baseline (Flower's strategies; redkit/federated/strategies.py)")
    baseline.add_argument("--strategy", default="fedavg", choices=("fedavg", "fedprox", "fedadam"))
    baseline.add_argument("--local-lr", type=float, default=2e-4, help="each owner's AdamW rate (default 2e-4)")
    baseline.add_argument("--local-epochs", type=int, default=1, help="each owner's epochs a round (default 1)")
    baseline.add_argument("--proximal-mu", type=float, default=0.01, help="FedProx's mu (default 0.01)")
    baseline.add_argument("--server-lr", type=float, default=1e-2, help="FedAdam's server rate eta (default 1e-2)")
    baseline.add_argument(
        "--patience",
        type=int,
        default=0,
        help="stop after this many rounds without a better accuracy on the owners' val (default 0: every round)",
    )
    baseline.add_argument(
        "--baseline-only", action="store_true", help="no RED round: the iterative baseline alone (a grid of settings)"
    )
    p.add_argument(
        "--round-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long a round waits for its owners' replies; an owner later than that is left out of it (default 600 "
        "an owner in the simulation runtime, which trains them one at a time; 600 in the deployment runtime)",
    )
    p.add_argument("--joint-epochs", type=int, default=3, help="the central joint fine-tune's epochs (0: not run)")
    p.add_argument(
        "--owner-experts",
        default="residual",
        choices=("residual", "tuned"),
        help="what each owner trains (redkit fit --recipe replay-free's --owner-experts): residual experts on the "
        "frozen features (default), or tuned: its own copy of the backbone's top 2 layers (the upload grows from "
        "about 35 to 150 MB an owner on CLINC150)",
    )
    p.add_argument("--max-epochs", type=int, default=None, help="cap every owner's epochs (quick runs)")
    p.add_argument(
        "--secure-aggregation",
        action="store_true",
        help="the owners' within-class scatters summed by Flower's SecAgg+: the server learns their sum, not one "
        "owner's (each owner's upload then carries its modules, label rows, class means and counts)",
    )
    router_settings(p, "the plan's gaussian router, over its owner kind's defaults: width=4096, seed=0")
    p.add_argument(
        "--insecure",
        action="store_true",
        help="deployment runtime: no TLS and no SuperNode authentication (by default each owner's key is registered)",
    )
    p.add_argument(
        "--netns",
        action="store_true",
        help="deployment runtime: the owners' SuperNodes in a network namespace of their own (Linux, root)",
    )
    p.add_argument("--no-one-machine", action="store_true", help="skip the same recipe in one process")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--push",
        default="",
        metavar="URL",
        help="a running `redkit serve --run` that gets each contribution accepted now (POST /v1/domains)",
    )
    p.add_argument(
        "--admin-token-env", default="REDKIT_ADMIN_TOKEN", metavar="NAME", help="with --push: the server's admin token"
    )


@command(
    "federate", options=_options, help="assemble RED from data owners over Flower, beside FedAvg (redkit[federated])"
)
def run(args) -> None:
    import os

    from redkit.errors import RedkitError
    from redkit.federated.federate import FederateConfig, federate
    from redkit.federated.strategies import IterativeConfig

    token = os.environ.get(args.admin_token_env, "") if args.push else ""
    if args.push and not token:
        raise RedkitError(f"--push needs the server's admin token in environment variable {args.admin_token_env}")
    if args.round_timeout is not None and args.round_timeout <= 0:
        raise RedkitError(f"--round-timeout must be positive, not {args.round_timeout:g}")
    if args.max_epochs is not None and args.max_epochs < 1:
        raise RedkitError(f"--max-epochs must be at least 1, not {args.max_epochs}")
    config = FederateConfig(
        data_dir=str(args.data),
        out=str(args.out),
        runtime=args.runtime,
        rounds=args.rounds,
        iterative=IterativeConfig(
            strategy=args.strategy,
            lr=args.local_lr,
            local_epochs=args.local_epochs,
            proximal_mu=args.proximal_mu,
            server_lr=args.server_lr,
            patience=args.patience,
        ),
        red=not args.baseline_only,
        seed=args.seed,
        round_timeout=args.round_timeout,
        joint_epochs=args.joint_epochs,
        owner_experts=args.owner_experts,
        max_epochs=args.max_epochs,
        secure_aggregation=args.secure_aggregation,
        router_options=parse_router_options(args.router_options),
        one_machine=not args.no_one_machine,
        insecure=args.insecure,
        netns=args.netns,
        push=args.push,
        admin_token=token,
    )
    results = federate(config)
    if red := results["red"]:
        print(
            f"RED, one round: accuracy {red['accuracy']:.4f}, {red['bytes_up']:,} bytes up, {red['bytes_down']:,} down"
        )
    if secure := red.get("secure_sum"):
        print(f"  its scatters summed by SecAgg+: {secure['bytes_up']:,} bytes up, {secure['bytes_down']:,} down")
    label = results.get("iterative", {}).get("label", args.strategy)
    for r in results["fedavg"]:
        left_out = f", left out: {', '.join(r['missing'])}" if r.get("missing") else ""
        val = f" (val {r['val_accuracy']:.4f})" if "val_accuracy" in r else ""
        print(f"{label}, round {r['round']}: accuracy {r.get('accuracy', float('nan')):.4f}{val}{left_out}")
    if best := results.get("iterative", {}).get("best"):
        print(f"{label}: {results['iterative']['stopped']}; round {best['round']} by the owners' val")
    if "fedavg_failed" in results:
        print(f"{label} stopped: {results['fedavg_failed']}")
    print(f"wrote {args.out}/results.json and report.md")
