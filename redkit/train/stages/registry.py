"""What every stage shares: the registry it is found by, its timing in the run's log, its modules' metadata."""

import time
from collections.abc import Callable

from torch import nn

from redkit.modules.store import ModuleMeta
from redkit.registry import Registry
from redkit.train.loop import FitResult
from redkit.train.stage_run import StageRun

# The references (redkit/references) register their own training stages here too.
STAGES: Registry[Callable] = Registry("stage")


def timed(run: StageRun, stage: str, work: Callable[[], dict]) -> dict:
    """`work()`'s summary, its seconds added to the run's timings and both logged under `stage`."""
    start = time.perf_counter()
    summary = work()
    seconds = time.perf_counter() - start
    run.add_time(stage, seconds)
    run.log({"stage": stage, "event": "done", "seconds": seconds} | summary)
    return summary


def module_meta(
    run: StageRun, module: nn.Module, kind: str, domain: int | None, result: FitResult, precision: str = "fp32"
) -> ModuleMeta:
    """`precision`: the arithmetic it was trained in (fp32, or bf16 autocast); its weights are fp32."""
    return ModuleMeta(
        kind=kind,
        config=vars(module.config) if hasattr(module, "config") else {},
        backbone_fingerprint=run.fingerprint,
        data_hash=run.data_hash,
        seed=run.config.seed,
        domain=domain,
        metrics=fit_metrics(result) | {"precision": precision},
    )


def fit_metrics(result: FitResult) -> dict:
    """What a module's metadata records of its training: best val loss, epochs, best epoch, seconds."""
    return {
        "best_val_loss": result.best_val_loss,
        "epochs": result.epochs,
        "best_epoch": result.best_epoch,
        "seconds": result.seconds,
    }
