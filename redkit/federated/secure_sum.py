"""The owners' within-class scatters summed by Flower's SecAgg+ (`redkit federate --secure-aggregation`): the server
learns their sum, never one owner's.

Why: an owner's scatter of φ (M × M float64; M = 2,048 residual, 4,096 tuned) is most of its upload, and it says
the most about its data: on 1,500 examples it has rank below M, φ and the backbone are public, so whether a given
text was among them can be read off its column space. The router needs only the sum of everyone's scatters
(redkit/incremental/statistics.py: merge). Everything else an owner sends is its own domain's (modules, label
rows, class means and counts) and is checked one owner at a time as before (assemble.py).

How, with Flower's own protocol, unchanged:

    owner   its contribution's statistics carry counts and means only (DomainStatistics.withholding); Σ of its
            domains' scatters stays in its work directory (scatter_share.py). In the secure round Flower's
            `secaggplus_mod` (flower_app.py: the ClientApp's mod for these messages) masks it (masks agreed pairwise with the other owners, and a private one whose seed it Shamir-shares
            among them) and sends the masked integers.
    server  Flower's `SecAggPlusWorkflow` adds the masked vectors (the pairwise masks cancel), removes the private
            masks from the owners' seed shares (an owner that drops after sending is still unmasked) and gives the
            sum, and nothing else, to a strategy (SumOfShares) that keeps it.

Exact sums. SecAgg+ adds integers modulo 2^32: each owner's scatter goes as three limbs of whole numbers
(scatter_share.py). The workflow's quantiser is made the identity (clipping range 2^23 and quantisation range 2^24:
x ↦ x + 2^23, a whole number stays one) and its weighting by examples neutral (every owner weighs max_weight = 1). The
workflow hands back each limb's sum divided by the owners' count as a float64; times the count, rounded, it is the
integer sum again (its error is below 2^-20), so the summed scatter is the plain sum bit for bit, and the router built
from it the same (tests/test_federated.py compares the module files with the one-process recipe's).

What it costs and what the server no longer sees are in docs/guides/federated.md.
"""

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict
from flwr.common import Code, FitIns, FitRes, Parameters, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.compat.common import recorddict_compat as compat
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.strategy import Strategy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey
from flwr.serverapp import Grid
from safetensors.torch import load_file

from redkit.errors import RedkitError
from redkit.federated.message_bytes import content_bytes
from redkit.federated.scatter_share import HALF, MAX_OWNERS, SHARE, from_limbs, limbs

SHARES = 1.0  # each owner's secrets are shared with every other owner (SecAgg+'s neighbourhood: all of them)
THRESHOLD = 2 / 3  # of those shares unmask an owner: a third may drop; the server and fewer colluding learn no share


# ---- the owner's side ------------------------------------------------------------------------------------


def share_reply(work: Path) -> RecordDict:
    """What the owner of `work` gives secaggplus_mod to mask: its SHARE's limbs as a legacy FitRes of weight 1."""
    path = Path(work) / SHARE
    if not path.is_file():
        raise RedkitError(f"{path}: no scatter share here; this owner has no contribution of a secure federation")
    parameters = ndarrays_to_parameters(limbs(load_file(str(path))["scatter"]))
    return compat.fitres_to_recorddict(FitRes(Status(Code.OK, ""), parameters, 1, {}), keep_input=False)


# ---- the server's side -----------------------------------------------------------------------------------


class SumOfShares(Strategy):
    """The legacy strategy SecAggPlusWorkflow asks: fit instructions (empty) for the owners' nodes, and, from the
    workflow, the sum of the shares of the nodes that sent theirs (aggregate_fit's results)."""

    def __init__(self, grid: Grid, nodes: list[int], run_id: int):
        self.proxies = [GridClientProxy(node, grid, run_id) for node in nodes]
        self.summed: list[np.ndarray] | None = None
        self.nodes: list[int] = []

    def initialize_parameters(self, client_manager):
        return None

    def configure_fit(self, server_round, parameters, client_manager):
        return [(proxy, FitIns(Parameters([], ""), {})) for proxy in self.proxies]

    def aggregate_fit(self, server_round, results, failures):
        self.nodes = sorted(proxy.node_id for proxy, _ in results)
        self.summed = parameters_to_ndarrays(results[0][1].parameters)  # every result holds the sum
        return results[0][1].parameters, {}

    def configure_evaluate(self, server_round, parameters, client_manager):
        return []

    def aggregate_evaluate(self, server_round, results, failures):
        return None, {}

    def evaluate(self, server_round, parameters):
        return None


@dataclass
class MeteredGrid:
    """A Grid that counts the bytes of what it sends and receives, and times each exchange (the workflow talks to the
    grid directly)."""

    grid: Grid
    down: int = 0
    up: int = 0
    stages: list = field(default_factory=list)  # seconds each exchange took (SecAgg+'s four stages)

    def send_and_receive(self, messages, *, timeout=None):
        start, messages = time.perf_counter(), list(messages)
        self.down += sum(content_bytes(m.content) for m in messages)
        replies = list(self.grid.send_and_receive(messages, timeout=timeout))
        self.up += sum(content_bytes(r.content) for r in replies if not r.has_error())
        self.stages.append(time.perf_counter() - start)
        return replies

    def __getattr__(self, name):
        return getattr(self.grid, name)


def secure_sum(grid: Grid, context: Context, nodes: list[int], width: int, timeout: float) -> dict:
    """SecAgg+ over `nodes` (each an owner holding its SHARE): {"scatter": the (M, M) sum, "nodes": whose shares it
    sums, "bytes_up", "bytes_down", "stage_seconds": each stage's exchange}; one line if fewer than two owners take
    part or the protocol halts."""
    if not 2 <= len(nodes) <= MAX_OWNERS:
        raise RedkitError(
            f"secure aggregation over {len(nodes)} owners: it needs 2 to {MAX_OWNERS} (one owner's sum is its scatter)"
        )
    metered = MeteredGrid(grid)
    strategy = SumOfShares(metered, nodes, context.run_id)
    legacy = LegacyContext(context, strategy=strategy)
    legacy.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({WorkflowKey.CURRENT_ROUND: 1})
    legacy.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord()
    workflow = SecAggPlusWorkflow(
        SHARES,
        THRESHOLD,
        max_weight=1.0,  # every owner weighs 1: its share is not scaled
        clipping_range=float(HALF),  # with the quantisation range, the quantiser is x ↦ x + 2^23: exact
        quantization_range=2 * HALF,
        modulus_range=1 << 32,
        timeout=timeout,
    )
    workflow(metered, legacy)
    if strategy.summed is None:
        raise RedkitError(f"secure aggregation halted: fewer than {THRESHOLD:.0%} of the owners answered every stage")
    count = len(strategy.nodes)  # the workflow gives each limb's sum over the owners divided by their count
    sums = [np.rint(limb * count) for limb in strategy.summed]
    if len(sums) != 3 or any(s.size != width * (width + 1) // 2 for s in sums):
        raise RedkitError(
            f"secure aggregation gave {[s.size for s in sums]} entries, not 3 × {width} × {width + 1} / 2"
        )
    return {
        "scatter": from_limbs(*sums, width),
        "nodes": strategy.nodes,
        "bytes_up": metered.up,
        "bytes_down": metered.down,
        "stage_seconds": metered.stages,
    }
