"""`redkit federate --data DIR --out RUN`: RED over Flower from owners of one domain each, beside FedAvg.

    RUN/owners-data/<domain>/{train,val}.jsonl   DIR split by domain: what each owner holds (and nobody else)
    RUN/data/test.jsonl                          the experimenter's test split (every domain): accuracy only
    RUN/accepted/<owner>/                        each owner's contribution as received and checked
    RUN/model/, RUN/bundle/                      the assembled fit run and its bundle (eval, predict, serve)
    RUN/one-machine/                             the same recipe in one process (same_modules: sha256)
    RUN/results.json, RUN/report.md, RUN/accuracy_vs_bytes.png

    RUN/deployment/                              the deployment runtime's app, Flower config and logs

Both of Flower's runtimes run the same apps: the simulation runtime (on Ray) every owner in one process tree,
the deployment runtime a SuperLink and one SuperNode per owner as separate processes on 127.0.0.1, each SuperNode
given only its owner's data directory (deployment.py; docs/guides/federated.md runs them on separate machines).
"""

import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from redkit.atomic import write_json, write_jsonl
from redkit.bundle.manifest import file_digest
from redkit.errors import RedkitError
from redkit.federated.assemble import accepted_in, assemble, check
from redkit.federated.deployment import run_deployment
from redkit.federated.fedavg import FedAvgConfig, FineTune
from redkit.federated.flower_app import apps
from redkit.federated.namespaces import OwnersNetwork
from redkit.federated.owner import train_contribution
from redkit.federated.plan import FederationPlan
from redkit.federated.settings import Settings
from redkit.federated.strategies import IterativeConfig, best_round
from redkit.federated.upload import package
from redkit.fitting.data import load_fit_data, load_run_data
from redkit.fitting.records import Fields, LabelReader, read_records
from redkit.fitting.replay_free import has_tuned_owners
from redkit.jsonfile import read_json
from redkit.names import check_name
from redkit.provenance import provenance
from redkit.routers.gaussian import STATISTICS, STATISTICS_SUM

RUNTIMES = ("simulation", "deployment")
ROUND_TIMEOUT = 600.0  # seconds, for one owner's reply (a CLINC150 owner: about 10 s residual, 70 s tuned, here)


@dataclass
class FederateConfig:
    data_dir: str
    out: str
    runtime: str = "simulation"
    rounds: int = 10  # the iterative baseline's, at most (at least 10 for the comparison; 0: RED only)
    iterative: IterativeConfig = field(default_factory=IterativeConfig)  # FedAvg, FedProx or FedAdam (strategies.py)
    red: bool = True  # RED's round (off: the iterative baseline alone, as a grid of its settings runs it)
    seed: int = 0
    # seconds a round waits for its owners' replies, the late left out of it; None: ROUND_TIMEOUT an owner in the
    # simulation runtime (it trains them one at a time), ROUND_TIMEOUT in the deployment one (each on its own node)
    round_timeout: float | None = None
    owner_experts: str = "residual"  # what each owner trains: residual experts, or "tuned" top layers (plan.py)
    max_epochs: int | None = None  # caps every owner's epochs (quick runs; None: the recipe's)
    secure_aggregation: bool = False  # the owners' scatters summed by SecAgg+ (secure_sum.py)
    router_options: dict = field(default_factory=dict)  # the plan's router settings over its owner kind's defaults
    joint_epochs: int = 3  # joint_central: the joint fine-tune on the pooled data, the bound no owner may run
    one_machine: bool = True  # the same recipe in one process, for same_modules
    insecure: bool = False  # deployment runtime: plain HTTP and any node may connect (no TLS, no registered keys)
    netns: bool = False  # deployment runtime: the owners in a network namespace of their own (namespaces.py; root)
    drill: dict[str, int] = field(default_factory=dict)  # {owner: FedAvg round}: its app fails then (fault tests)
    push: str = ""  # a running `redkit serve --run` (URL) that gets each contribution accepted now ("": none)
    admin_token: str = field(default="", repr=False)  # its admin token (from the environment; never recorded)

    def __post_init__(self):
        if self.runtime not in RUNTIMES:
            raise RedkitError(f"--runtime {self.runtime!r} is not one of {', '.join(RUNTIMES)}")
        if not self.red and (self.push or not self.rounds):
            raise RedkitError("--baseline-only runs the iterative baseline alone: give it --rounds, and no --push")


def split_owners(data_dir: Path, out: Path, seed: int) -> tuple[list[Path], Path, tuple[str, ...]]:
    """DIR (fit files or CLINC150's data_full.json) split into one directory per domain (train and val) and the
    test split kept apart; (owner directories, test file, labels). Each owner is named for its one domain
    (`owner_names`): the name every node is given, as an owner's is on its own machine."""
    fmt = "clinc150" if (Path(data_dir) / "data_full.json").is_file() else "files"
    data = load_run_data(Path(data_dir), fmt, Fields(), seed, 0.1)
    owners = []
    for domain in data.domains:
        directory = out / "owners-data" / check_name(domain, "domain", str(data_dir))
        for split in ("train", "val"):
            write_jsonl(directory / f"{split}.jsonl", (r.to_json() for r in data.splits[split] if r.domain == domain))
        owners.append(directory)
    if "test" not in data.splits:
        raise RedkitError(f"{data_dir}: no test split; the comparison needs one (test.jsonl)")
    test = out / "data" / "test.jsonl"
    write_jsonl(test, (r.to_json() for r in data.splits["test"]))
    return owners, test, tuple(data.labels)


def owner_names(directories: list[Path]) -> dict[str, Path]:
    """{owner: its data directory} of split_owners' directories: owner i is named for its domain, whose name
    split_owners gave its directory (checked there, and again here: a name becomes a path)."""
    return {check_name(d.name, "owner", "the experimenter's split"): d for d in directories}


def in_scope_accuracy(run_dir: Path, test: Path, compositions: tuple[str, ...] = ("red",)) -> dict[str, float]:
    """{composition: accuracy} of the run on the test file (its features encoded once)."""
    from redkit.api import load

    return {name: m["accuracy"] for name, m in load(run_dir).evaluate(test, list(compositions)).items()}


def one_machine(plan: FederationPlan, owners: dict[str, Path], out: Path, print_fn=print) -> dict:
    """Every owner's contribution computed here, one after the other, and assembled as the server does."""
    start = time.perf_counter()
    accepted_dir = out / "accepted"
    accepted_dir.mkdir(parents=True, exist_ok=True)
    for name, data in owners.items():
        manifest = train_contribution(plan, data, out / "owners" / name, print_fn=lambda *_: None)
        check(package(out / "owners" / name, manifest), plan, name, accepted_dir, others=accepted_in(accepted_dir))
    shutil.rmtree(out / "model", ignore_errors=True)  # an earlier command's: assembled again from every contribution
    assemble(plan, accepted_in(accepted_dir), out / "model", print_fn)
    return {"seconds": time.perf_counter() - start}


def module_digests(run_dir: Path) -> dict[str, str]:
    """sha256 of every module's weights in a run (modules/<part>/.../model.safetensors)."""
    return {
        str(p.parent.relative_to(run_dir)): file_digest(p)
        for p in sorted((run_dir / "modules").rglob("model.safetensors"))
    }


def beyond_statistics(digests: dict[str, str]) -> dict[str, str]:
    """Module digests but the statistics' (modules/statistics/<d>, modules/statistics_sum)."""
    return {k: v for k, v in digests.items() if Path(k).parts[1] not in (STATISTICS, STATISTICS_SUM)}


def joint_central(labels: tuple[str, ...], owners: list[Path], test: Path, epochs: int, seed: int, cache: Path) -> dict:
    """The joint fine-tune on every owner's training examples pooled: what no owner may run. Every one of its
    `epochs` is trained (the joint recipe's linear schedule over all of them, no early stop), and the epoch with
    the best accuracy on every owner's validation examples pooled is kept (ties: val loss)."""
    start = time.perf_counter()
    data = [load_fit_data(d, Fields(), seed, 0.1).splits for d in owners]
    train, val = ([r for splits in data for r in splits[name]] for name in ("train", "val"))
    config = FedAvgConfig(seed=seed)
    config.training = replace(
        config.training,
        max_epochs=epochs,
        patience=epochs,  # no early stop: every epoch it is given
        schedule="linear",
        warmup_ratio=0.1,
        select_by="accuracy",
    )
    model = FineTune(config, labels)
    val_texts, val_labels = [r.question for r in val], [r.answer for r in val]
    result = model.train(
        [r.question for r in train],
        [r.answer for r in train],
        cache,
        seed,
        validate=lambda: model.validation(val_texts, val_labels, cache),
        desc="joint (central)",
    )
    records = read_records(test, Fields(), LabelReader())
    accuracy = model.accuracy([r.question for r in records], [r.answer for r in records], cache)
    return {
        "accuracy": accuracy,
        "epochs": result.epochs,
        "best_epoch": result.best_epoch,
        "val_accuracy": result.best_val_accuracy,
        "val_by_epoch": [{"accuracy": h["val_accuracy"], "loss": h["val_loss"]} for h in result.history],
        "examples": len(train),
        "val_examples": len(val),
        "seconds": time.perf_counter() - start,
    }


def federate(config: FederateConfig, print_fn=print) -> dict:
    plan = FederationPlan.of(  # before anything is written: a setting it refuses is one line
        seed=config.seed,
        owner_experts=config.owner_experts,
        max_epochs=config.max_epochs,
        secure_aggregation=config.secure_aggregation,
        router_options=config.router_options,
    )
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    directories, test, labels = split_owners(Path(config.data_dir), out, config.seed)
    owners = owner_names(directories)
    settings = Settings(
        plan=plan.to_json(),
        run_dir=str(out.resolve()),
        owners=len(owners),
        rounds=config.rounds,
        iterative=asdict(config.iterative),
        red=config.red,
        labels=list(labels),
        test=str(test.resolve()),
        owner_work=str((out / "owners").resolve()),
        round_timeout=config.round_timeout or ROUND_TIMEOUT * (len(owners) if config.runtime == "simulation" else 1),
        drill=dict(config.drill),
    )
    print_fn(f"{len(owners)} owners ({', '.join(owners)}), runtime {config.runtime}")
    wall, processes = time.perf_counter(), None
    if config.runtime == "simulation":  # partition i is owner i; a SuperNode is given its own name and data
        names, dirs = list(owners), [str(d.resolve()) for d in owners.values()]
        run_simulation(replace(settings, owner_names=names, owner_dirs=dirs))
    else:
        network = OwnersNetwork() if config.netns else None
        processes = run_deployment(
            settings, owners, out / "deployment", print_fn, secure=not config.insecure, network=network
        )
    server = read_json(out / "federation" / "server.json", "the federation server's results")
    red = server["red"]
    if config.red:
        red |= red_figures(out, plan, test)
    if config.push:
        red["pushed"] = push_accepted(config.push, config.admin_token, out / "accepted", red["sent_now"], print_fn)
    results = {
        "red": red,
        "runtime": config.runtime,
        "wall_seconds": time.perf_counter() - wall,
        **({"deployment": processes} if processes else {}),
        "fedavg": server["fedavg"],
        **({"fedavg_failed": server["fedavg_failed"]} if "fedavg_failed" in server else {}),
    }
    if config.rounds:  # the iterative baseline's settings, why it stopped and its round by val
        best = best_round(server["fedavg"])
        label = {"label": config.iterative.label(), "best": best}
        results["iterative"] = asdict(config.iterative) | server.get("iterative", {}) | label
    if config.one_machine and config.red:  # the plain recipe: a secure sum must give what the plain one does
        same = one_machine(replace(plan, secure_aggregation=False), owners, out / "one-machine", print_fn)
        same["accuracy"] = in_scope_accuracy(out / "one-machine" / "model", test)["red"]
        digests, local = module_digests(out / "model"), module_digests(out / "one-machine" / "model")
        if plan.secure_aggregation:  # its statistics hold counts and means, the sum beside them: the rest compared
            digests, local = (beyond_statistics(d) for d in (digests, local))
        results["one_machine"] = same
        results["same_modules"] = digests == local
        results["modules_compared"] = len(digests)
    if config.joint_epochs:
        results["joint_central"] = joint_central(
            labels, list(owners.values()), test, config.joint_epochs, config.seed, out / "fedavg-cache"
        )
    results["config"] = asdict(config) | {"admin_token": "<not recorded>" if config.admin_token else ""}
    results["provenance"] = provenance()
    write_json(out / "results.json", results)
    from redkit.federated.report import write_report

    write_report(out, results)
    return results


def red_figures(out: Path, plan: FederationPlan, test: Path) -> dict:
    """RED's test accuracy (and the per-domain composition's, where the owners are residual) and owner kind."""
    per_domain = () if has_tuned_owners(plan) else ("red_per_domain",)  # tuned owners' runs have red and red_oracle
    accuracy = in_scope_accuracy(out / "model", test, ("red", *per_domain))
    figures = {"accuracy": accuracy["red"], "owner_experts": plan.owner_experts}
    if per_domain:
        figures["accuracy_per_domain_composition"] = accuracy["red_per_domain"]
    return figures


def push_accepted(url: str, token: str, accepted: Path, owners: list[str], print_fn=print) -> dict[str, int]:
    """Each owner's contribution accepted in this round, uploaded to the running server at `url`, which checks it
    again and swaps in the model assembled with it; {owner: the model version it now serves}."""
    from redkit.federated.upload import push

    versions = {}
    for owner in owners:
        answer = push(url, owner, accepted / owner, token)
        versions[owner] = answer["model"]["version"]
        print_fn(f"pushed owner {owner} to {url}: it serves model version {versions[owner]}")
    return versions


def run_simulation(settings: Settings) -> None:
    """Flower's simulation runtime: one SuperNode per owner on this machine (Ray), one owner at a time (each
    owner's training is given both cores, as it would have its own machine's)."""
    from flwr.simulation import run_simulation as flower_simulation

    server, client = apps(settings)
    flower_simulation(
        server_app=server,
        client_app=client,
        num_supernodes=settings.owners,
        backend_config={"client_resources": {"num_cpus": 2, "num_gpus": 0.0}, "init_args": {"num_cpus": 2}},
    )
    if not (Path(settings.run_dir) / "federation" / "server.json").is_file():
        raise RedkitError("the Flower server app ended without its results (see the log above for its error)")
