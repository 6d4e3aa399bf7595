"""`redkit federate --data DIR --out RUN [--runtime simulation|deployment] [--rounds R]`: data owners, one
domain each, assemble a RED model over Flower, beside Flower's FedAvg (redkit/federated)."""

import argparse
from pathlib import Path

from redkit.cli.command import command


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data", type=Path, default=Path("data/clinc150"), help="fit-format data or CLINC150 (default data/clinc150)"
    )
    p.add_argument("--out", required=True, type=Path, help="the federation's directory (RUN/model is the run)")
    p.add_argument("--runtime", default="simulation", choices=("simulation", "deployment"))
    p.add_argument("--rounds", type=int, default=10, help="FedAvg's rounds (0: RED alone)")
    p.add_argument("--joint-epochs", type=int, default=3, help="the central joint fine-tune's epochs (0: not run)")
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

    token = os.environ.get(args.admin_token_env, "") if args.push else ""
    if args.push and not token:
        raise RedkitError(f"--push needs the server's admin token in environment variable {args.admin_token_env}")
    config = FederateConfig(
        str(args.data),
        str(args.out),
        args.runtime,
        args.rounds,
        args.seed,
        args.joint_epochs,
        not args.no_one_machine,
        args.push,
        token,
    )
    results = federate(config)
    red = results["red"]
    print(f"RED, one round: accuracy {red['accuracy']:.4f}, {red['bytes_up']:,} bytes up, {red['bytes_down']:,} down")
    for r in results["fedavg"]:
        print(f"FedAvg round {r['round']}: accuracy {r.get('accuracy', float('nan')):.4f}")
    print(f"wrote {args.out}/results.json and report.md")
