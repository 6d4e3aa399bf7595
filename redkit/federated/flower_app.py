"""The Flower app that carries both methods: one ServerApp (the federation's server) and one ClientApp (each
owner), over Flower's messages (RecordDict: ArrayRecord, ConfigRecord, MetricRecord) and nothing else.

    server                                            owner (one per SuperNode, its data only)
    train.red     ─────── the plan (plan.py), ───────► its name (given to it: its node config's "owner");
                          the accepted owners            if not accepted yet, train_contribution (owner.py)
                  ◄────── its name, module files ─────  (an ArrayRecord of uint8 arrays, one per file)
                          + manifest (or its name only)
      names checked, then each contribution (assemble.py); the accepted assembled into RUN/model, RUN/bundle
    train         ─────── SecAgg+'s four stages ──────► (a plan with secure_aggregation, before assembling: the
                  ◄────── its masked scatter share ───  accepted owners' scatters summed, none seen alone:
                                                        secure_sum.py)
    train         ─────── the baseline's weights ────► E local epochs (fedavg.py)
                  ◄────── weights, example count ────  Flower's FedAvg, FedProx or FedAdam combines them
    evaluate      ─────── the new weights ───────────► scored on the owner's val split
                  ◄────── accuracy, example count ───  up to R rounds, or until val stops rising (iterative.py)

Settings reach both sides two ways: the simulation runtime builds the apps around a `Settings` (closures,
`apps(settings)`); the deployment runtime (`flwr run`) loads the module-level `server` and `client`, which read
the same settings from the run config (key "settings": Settings as JSON) and each SuperNode's node config
("owner": its name, "data-dir": its own data, "work-dir": where it keeps its work). An owner's name is always
given (never read off a directory: two owners' data directories may both be called "data"), and two nodes that
give one name are both refused before anything of theirs is staged.

Faults: each round (RED's, each of FedAvg's) waits `round_timeout` seconds for its replies at most; an owner
whose process dies (or that does not answer in time) is left out of that round, named in the results, and the
round goes on with the others. RED's results are written before FedAvg starts: nothing FedAvg does can lose them.
"""

import hashlib
import json
import shutil
import time
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from redkit.atomic import write_json
from redkit.errors import RedkitError
from redkit.federated.message_bytes import content_bytes, failure
from redkit.federated.settings import Settings
from redkit.federated.upload import package
from redkit.fitting.data import load_fit_data
from redkit.fitting.records import Fields
from redkit.names import check_name

# torch and the training code (plan, owner, assemble, fedavg) are imported inside the handlers that use them: the
# deployment runtime starts a ClientApp process for every message, and one that only says who its owner is
# should not pay for torch (measured here: 1.1 s of the 1.6 s this module took to import with them).


# ---- the owner's side ------------------------------------------------------------------------------------


def owner_paths(context: Context, settings: Settings) -> tuple[str, Path, Path]:
    """(owner name, its data directory, its work directory): the SuperNode's node config where given
    (deployment: "owner", "data-dir", "work-dir"), else partition i of the settings' owners (simulation)."""
    config = context.node_config
    if "data-dir" in config:
        if "owner" not in config:
            raise RedkitError('this SuperNode\'s --node-config has no "owner": give the owner\'s name (owner="NAME")')
        name = check_name(str(config["owner"]), "owner", "the SuperNode's --node-config")
        data = Path(str(config["data-dir"]))
        work = Path(str(config.get("work-dir", data.parent / f"{name}.work")))
    else:
        partition = int(config["partition-id"])
        name = check_name(settings.owner_names[partition], "owner", "the simulation's owners")
        data, work = Path(settings.owner_dirs[partition]), Path(settings.owner_work) / name
    return name, data, work


def client_app(settings: Settings | None = None) -> ClientApp:
    """The owner's app; `settings` None: read from the run config (deployment)."""
    app = ClientApp()

    def resolved(context: Context) -> Settings:
        return settings or Settings.from_context(context)

    @app.train("red")
    def contribute(message: Message, context: Context) -> Message:
        name, data, work = owner_paths(context, resolved(context))
        said = {"owner": ConfigRecord({"owner": name})}
        if name_digest(name) in json.loads(str(message.content["plan"]["accepted"])):
            return Message(RecordDict(said), reply_to=message)  # accepted in an earlier round: nothing to send

        from redkit.federated.owner import train_contribution
        from redkit.federated.plan import FederationPlan

        plan = FederationPlan.from_json(str(message.content["plan"]["plan"]))
        manifest = train_contribution(plan, data, work, print_fn=lambda *_: None)
        files = package(work, manifest)  # module files and the manifest: no example, no feature
        arrays = ArrayRecord({rel: Array(np.frombuffer(b, dtype=np.uint8)) for rel, b in files.items()})
        return Message(RecordDict({"files": arrays} | said), reply_to=message)

    def secure_round(message: Message, context: Context, call_next) -> Message:
        """SecAgg+'s messages (their config record says so) to Flower's secaggplus_mod, which masks this owner's
        scatter share; every other "train" message (FedAvg's) to local_epoch."""
        from flwr.client.mod import secaggplus_mod
        from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS

        if RECORD_KEY_CONFIGS not in message.content.config_records:
            return call_next(message, context)
        from redkit.federated.secure_sum import share_reply

        def reply(m: Message, c: Context) -> Message:
            return Message(share_reply(owner_paths(c, resolved(c))[2]), reply_to=m)

        return secaggplus_mod(message, context, reply)

    @app.train(mods=[secure_round])
    def local_epoch(message: Message, context: Context) -> Message:
        """A round of the iterative baseline: E local epochs from the server's weights (fedavg.py), the round's
        settings read from its config (FedProx's strategy adds its "proximal-mu")."""
        config = message.content["config"]
        round_ = int(config["server-round"])
        model, train, name, work, seed = owner_model(message, context)
        if resolved(context).drill.get(name) == round_:  # a fault drill: this owner fails mid-round (the tests')
            raise RuntimeError(f"fault drill: owner {name} fails in FedAvg round {round_}")
        n = model.train_round(
            [r.question for r in train["train"]],
            [r.answer for r in train["train"]],
            work / "fedavg-cache",
            seed * 10_000 + round_,  # seed 0: the round, as before the seeds
            epochs=int(config.get("local-epochs", 1)),
            lr=float(config["lr"]) if "lr" in config else None,
            proximal_mu=float(config.get("proximal-mu", 0.0)),
        )
        content = {"arrays": ArrayRecord(model.state()), "metrics": MetricRecord({"num-examples": n})}
        return Message(RecordDict(content | {"owner": ConfigRecord({"owner": name})}), reply_to=message)

    @app.evaluate()
    def score_val(message: Message, context: Context) -> Message:
        """The server's weights scored on this owner's val split: its accuracy and example count (Flower's
        weighted mean of them is the accuracy on every owner's val pooled), no example sent."""
        model, splits, name, work, _ = owner_model(message, context)
        val = splits["val"]
        figures = model.validation([r.question for r in val], [r.answer for r in val], work / "fedavg-cache")
        metrics = MetricRecord({"accuracy": figures["accuracy"], "loss": figures["loss"], "num-examples": len(val)})
        return Message(RecordDict({"metrics": metrics, "owner": ConfigRecord({"owner": name})}), reply_to=message)

    def owner_model(message: Message, context: Context):
        """(the fine-tune holding the message's weights, this owner's splits, its name, work directory, seed)."""
        from redkit.federated.fedavg import FedAvgConfig, FineTune
        from redkit.federated.plan import FederationPlan

        s = resolved(context)
        name, data, work = owner_paths(context, s)
        plan = FederationPlan.from_json(s.plan)
        splits = load_fit_data(data, Fields(), plan.seed, plan.val_fraction).splits
        model = FineTune(FedAvgConfig(seed=plan.seed), tuple(s.labels))
        model.load(message.content["arrays"].to_torch_state_dict())
        return model, splits, name, work, plan.seed

    return app


# ---- the server's side -----------------------------------------------------------------------------------


def wait_for_owners(grid: Grid, count: int, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while len(nodes := list(grid.get_node_ids())) < count:
        if time.monotonic() > deadline:
            raise RedkitError(f"{len(nodes)} of {count} owners connected within {timeout:.0f} s")
        time.sleep(0.5)
    return sorted(nodes)


def ask(grid: Grid, nodes: list[int], kind: str, content: RecordDict, timeout: float) -> tuple[dict, int]:
    """Send `content` as `kind` to every node; ({node: its reply}, bytes sent). A reply is matched to the node
    asked by the message it answers: an error the SuperLink writes for a node it lost (its heartbeat stopped)
    comes from the SuperLink, not from that node."""
    messages = [Message(content, dst_node_id=n, message_type=kind) for n in nodes]
    sent = sum(content_bytes(m.content) for m in messages)
    replies = list(grid.send_and_receive(messages, timeout=timeout))  # sending gives each message its id
    node_of = {m.metadata.message_id: m.metadata.dst_node_id for m in messages}
    return {node_of[r.metadata.reply_to_message_id]: r for r in replies}, sent


def name_digest(name: str) -> str:
    """What the server sends of an accepted owner's name: an owner recognises its own, and learns another's only
    by guessing it."""
    return hashlib.sha256(name.encode()).hexdigest()


def unique_names(named: dict[int, str], registered: dict[str, str]) -> tuple[dict[int, str], dict[str, str]]:
    """({node: name} of the names one node gives, {name: why refused}), before anything of theirs is staged: a
    name two nodes give is refused for both (neither can be told from the other: a name is an owner's identity),
    and where keys were registered ({node id: owner}), a node that gives a name other than its key's."""
    refused = {}
    for node, name in sorted(named.items()):
        if registered and registered.get(str(node)) != name:
            holder = registered.get(str(node))
            refused[name] = f"node {node} gives the owner name {name!r}, but its key is {holder!r}'s"
    for name in sorted(set(named.values())):
        claimed_by = sorted(n for n, given in named.items() if given == name)
        if len(claimed_by) > 1:
            refused[name] = f"{len(claimed_by)} nodes ({', '.join(map(str, claimed_by))}) give the owner name {name!r}"
    return {n: name for n, name in named.items() if name not in refused}, refused


def red_round(grid: Grid, nodes: list[int], settings: Settings, context: Context, print_fn=print) -> dict:
    """RED's one round: every owner not yet accepted trains and sends its contribution; each is checked and
    the accepted ones (this round's and earlier rounds', RUN/accepted) assembled into RUN/model and RUN/bundle
    (with secure aggregation, those whose scatter shares SecAgg+ summed)."""
    from redkit.bundle.export import export_bundle
    from redkit.federated.assemble import accepted_in, assemble, check
    from redkit.federated.plan import FederationPlan
    from redkit.modules.store import install_module

    start = time.perf_counter()
    run, plan = Path(settings.run_dir), FederationPlan.from_json(settings.plan)
    accepted_dir = run / "accepted"
    accepted_dir.mkdir(parents=True, exist_ok=True)
    # One message to every node: the plan, and which owners are accepted already (they answer with their name
    # only). Asking every node its name first cost a round of ClientApp processes (9.5 s of 108 in the
    # deployment runtime with ten owners on two cores).
    done = [name_digest(a.owner) for a in accepted_in(accepted_dir)]
    content = RecordDict({"plan": ConfigRecord({"plan": settings.plan, "accepted": json.dumps(done)})})
    replies, down = ask(grid, nodes, "train.red", content, settings.round_timeout)
    named = {n: str(r.content["owner"]["owner"]) for n, r in replies.items() if not r.has_error()}
    owner_of, refused = unique_names(named, settings.registered)  # before anything of theirs is staged
    missing = {}
    for node in nodes:  # a node that failed before it said its name: its registered key's owner, if any
        who = settings.registered.get(str(node), f"node {node}")
        if node not in replies:
            missing[who] = f"no reply within {settings.round_timeout:.0f} s"
        elif replies[node].has_error():
            missing[who] = failure(replies[node])
    up, sent_now = 0, []
    # Checked in the order of the owners' names, each against every contribution accepted before it: which of
    # two owners claiming one domain is refused depends on their names, never on whose reply came first.
    for node, owner in sorted(owner_of.items(), key=lambda item: item[1]):
        reply = replies[node]
        if "files" not in reply.content:
            continue  # accepted in an earlier round
        up += content_bytes(reply.content)
        files = {rel: array.numpy().tobytes() for rel, array in reply.content["files"].items()}
        try:
            check(files, plan, owner, accepted_dir, settings.size_limit, others=accepted_in(accepted_dir))
            sent_now.append(owner)
        except RedkitError as err:
            refused[owner] = str(err)
    phases = {"contributions trained, sent and checked": time.perf_counter() - start}
    accepted = accepted_in(accepted_dir)
    if not accepted:
        raise RedkitError("no owner's contribution was accepted: nothing to assemble")
    summed, secure = None, {}
    if plan.secure_aggregation:
        accepted, summed, secure = sum_scatters(grid, context, plan, owner_of, accepted, settings, missing)
        phases["scatters summed (SecAgg+)"] = time.perf_counter() - start
    for owner, why in {**missing, **refused}.items():
        print_fn(f"owner {owner}: left out ({why}); it can join later: run the same command again")
    shutil.rmtree(run / "model.new", ignore_errors=True)  # what a crash left half-written
    shutil.rmtree(run / "bundle.new", ignore_errors=True)
    model = assemble(plan, accepted, run / "model.new", print_fn, summed)
    install_module(run / "model.new", run / "model")
    assembled = time.perf_counter() - start
    export_bundle(run / "model", run / "bundle.new")
    install_module(run / "bundle.new", run / "bundle")
    return {
        "owners": {a.owner: list(a.manifest["domains"]) for a in accepted},
        "domains": list(model.space.domains),
        "nodes": {str(n): name for n, name in sorted(owner_of.items())},  # who each node said it is
        "sent_now": sent_now,  # accepted in this round
        "missing": missing,
        "refused": refused,
        "bytes_up": up,
        "bytes_down": down,
        **({"secure_sum": secure} if secure else {}),
        "assembled_seconds": assembled,  # from the first message to RUN/model in place
        "seconds": time.perf_counter() - start,  # and RUN/bundle exported
        "phases": phases,  # seconds since the first message when each phase ended
    }


def sum_scatters(
    grid: Grid, context: Context, plan, owner_of: dict[int, str], accepted: list, settings: Settings, missing: dict
):
    """(the accepted owners whose scatter shares SecAgg+ summed, their sum as a module, what it cost): secure_sum.py
    over every accepted owner connected now (an earlier round's too: its share is needed again). An owner not in the
    sum (not connected, or dropped out of the protocol) is left out of this assembly, named in `missing`, and its
    contribution kept for the next round."""
    from redkit.federated.assemble import summed_module
    from redkit.federated.secure_sum import secure_sum
    from redkit.routers.gaussian import input_width

    start = time.perf_counter()
    names = {a.owner for a in accepted}
    nodes = {node: owner for node, owner in owner_of.items() if owner in names}
    width = plan.router_options["width"] or input_width(plan.router_options, accepted[0].manifest["dim"])
    result = secure_sum(grid, context, sorted(nodes), width, settings.round_timeout)
    summed = {nodes[node] for node in result["nodes"]}
    for owner in sorted(names - summed):
        how = "it dropped out of the secure round" if owner in nodes.values() else "not connected for the secure round"
        missing[owner] = f"its scatter share is not in the secure sum ({how})"
    accepted = [a for a in accepted if a.owner in summed]
    cost = {k: result[k] for k in ("bytes_up", "bytes_down", "stage_seconds")} | {
        "seconds": time.perf_counter() - start
    }
    return accepted, summed_module(plan, accepted, result["scatter"]), {"owners": sorted(summed)} | cost


def server_main(grid: Grid, settings: Settings, context: Context) -> None:
    """RED's round (unless `settings.red` is off: the baseline alone), its results written, then the iterative
    baseline's rounds."""
    run = Path(settings.run_dir)
    nodes = wait_for_owners(grid, settings.owners, settings.timeout)
    red = red_round(grid, nodes, settings, context) if settings.red else {}
    results = run / "federation" / "server.json"
    write_json(results, {"red": red, "fedavg": []})  # before the baseline: whatever happens to it, RED's is kept
    if settings.rounds:
        from redkit.federated.iterative import iterative_rounds  # the server's side only: an owner's process skips it

        names, ledger = {int(node): name for node, name in red.get("nodes", {}).items()}, []
        try:
            outcome = iterative_rounds(grid, settings, ledger, names)
        except Exception as err:  # the reference failed: said in the results, RED's round and the rounds done kept
            failed = f"{type(err).__name__}: {err}"
            print(f"the iterative baseline stopped after {len(ledger)} rounds: {failed}")
            write_json(results, {"red": red, "fedavg": ledger, "fedavg_failed": failed})
            return
        write_json(results, {"red": red, "fedavg": ledger, "iterative": outcome})


def server_app(settings: Settings | None = None) -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        server_main(grid, settings or Settings.from_context(context), context)

    return app


def apps(settings: Settings) -> tuple[ServerApp, ClientApp]:
    """Both apps around `settings` (the simulation runtime)."""
    return server_app(settings), client_app(settings)


# The deployment runtime's entry points (`flwr run`: [tool.flwr.app.components] of the app's pyproject.toml).
server = server_app()
client = client_app()
