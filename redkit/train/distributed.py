"""Stage base in N processes: data parallel over torch.distributed (gloo on CPU, NCCL on GPU).

    redkit train base --run RUN --nproc N          redkit launches it (torch.distributed.run, standalone)
    redkit reproduce task1 ... --nproc N           the same for the run's stage base; the other stages
                                                   train small modules on cached features, in one process
    torchrun --nproc_per_node N -m redkit.train.distributed RUN                  directly

What the N processes compute, against the one-process run (`Ranks.shard` / `reduce_gradients` in redkit/train/ranks.py):
  * the same epochs, the same shuffled order (seeded per epoch, identical on every rank) and the same
    global micro-batches of `batch_size` examples; each global batch is cut into N contiguous
    slices, one per rank, and every rank scales its slice's mean loss by (its rows / global rows),
    so that the gradients, summed over ranks by one all-reduce per optimizer step, are the gradient
    of the global batch's mean loss: what one process computes, up to rounding (and so are AdamW's
    moments, which is what lets a one-process rerun resume an N-process checkpoint);
  * identical parameters and optimizer states on every rank (same initialisation, same reduced
    gradients, the same checkpoint read on resume);
  * the validation loss summed over ranks' slices of the validation texts, and rank 0's value
    broadcast, so that every rank stops at the same epoch and keeps the same one;
  * rank 0 alone writes the checkpoint, the log, timings.json and the modules.
What is not the same: (1) rounding: the all-reduce adds the ranks' partial gradients in another
order than one process's backward does, and each rank's matmuls have other shapes; (2) dropout:
each rank draws its own masks for its own slice, so with a dropout backbone (MiniLM: p = 0.1) an
N-process run is another draw of the same training, not a rounding-level copy; on a backbone
without dropout (Qwen3) it matches to rounding (tests/test_distributed.py states by how much).

The frozen-prefix cache is built once, before launching (or by rank 0 when torchrun starts the
ranks directly), and read by every rank. The checkpoint is the one-process checkpoint: a killed
N-process stage base resumes with 1 or M processes.
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from redkit.errors import RedkitError
from redkit.train.ranks import Ranks


def check_nproc(nproc: int, base_examples: int, batch_size: int) -> None:
    """Refuse, before anything is written, a process count the base subset cannot feed: every rank
    needs at least one example of every full global batch."""
    if nproc < 1:
        raise RedkitError(f"--nproc {nproc}: must be at least 1")
    most = min(batch_size, base_examples)
    if nproc > most:
        raise RedkitError(
            f"--nproc {nproc}: stage base has {base_examples} examples in global batches of "
            f"{batch_size}, so at most {most} processes can each get a share of every batch"
        )


def predicted_base_examples(directory: Path, config) -> int:
    """The size of a run's base subset: read where the run has its data, else what the run's config
    says `base_subset` will draw (`planned_base_examples`), without writing anything."""
    data = Path(directory) / "data"
    if (data / "base_subset.json").is_file():
        return len(json.loads((data / "base_subset.json").read_text()))
    if (data / "splits.json").is_file():
        train = json.loads((data / "splits.json").read_text())["splits"]["train"]["count"]
        return round(train * config.base_fraction)
    return config.planned_base_examples()


def check_run_nproc(directory: Path, config, nproc: int) -> None:
    """`check_nproc` for the run in `directory` made with `config` (which may not exist yet)."""
    check_nproc(nproc, predicted_base_examples(directory, config), config.train_config("base").batch_size)


def die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent dies. A SIGKILLed launcher cannot stop its
    children, and ranks left running would finish stage base beside the rerun that resumes it."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == 1:  # the parent died before the call
            os.kill(os.getpid(), signal.SIGKILL)


def launch_base(run, nproc: int) -> dict:
    """Stage base of `run` in `nproc` processes under torch's elastic launcher; this process builds
    the data and the frozen-prefix cache first, so the ranks only read them. Returns the stage's
    summary as rank 0 wrote it; `run` is refreshed (tuned backbone, timings)."""
    from redkit.modules.store import module_exists
    from redkit.train.stages import prepare_base

    if module_exists(run.module_dir("backbone_top")) and module_exists(run.module_dir("classifier")):
        return {"skipped": "base"}
    run.prepare_data()
    prepare_base(run)
    check_run_nproc(run.dir, run.config, nproc)
    env = dict(
        os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    )
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "redkit.train.distributed",
        str(run.dir),
    ]
    for cached in ("backbone", "fingerprint"):  # loaded before it was tuned; and its memory is the ranks'
        run.__dict__.pop(cached, None)
    done = subprocess.run(command, env=env, preexec_fn=die_with_parent)
    if done.returncode != 0:
        raise RedkitError(
            f"stage base in {nproc} processes failed (exit code {done.returncode}); its ranks' "
            f"messages are above; rerun to resume from {run.module_dir('classifier')}'s checkpoint"
        )
    run.timings = run._read_timings()
    meta = run.module_dir("classifier") / "config.json"
    metrics = json.loads(meta.read_text())["metrics"]
    return {
        "epochs": metrics["epochs"],
        "best_epoch": metrics["best_epoch"],
        "best_val_loss": metrics["best_val_loss"],
        "nproc": nproc,
    }


def main(argv: list[str] | None = None) -> int:
    """One rank of stage base (started by torchrun, which sets RANK, WORLD_SIZE, MASTER_ADDR ...)."""
    from redkit.plugins import load_plugins
    from redkit.run import open_run
    from redkit.train.stages import stage_base

    load_plugins()  # this process is a top: the run kinds, stages and modules of every installed package
    argv = sys.argv[1:] if argv is None else argv
    die_with_parent()  # the launcher (torchrun's agent)
    if len(argv) != 1:
        print("usage: torchrun --nproc_per_node N -m redkit.train.distributed RUN", file=sys.stderr)
        return 2
    try:
        run = open_run(Path(argv[0]))
        if not hasattr(run, "base_subset"):
            raise RedkitError(f"{argv[0]}: a {type(run).__name__} has no text stage base to distribute")
        backend = "nccl" if run.device.type == "cuda" else "gloo"
        dist.init_process_group(backend)
        ranks = Ranks(dist.get_rank(), dist.get_world_size())
        if run.device.type == "cuda":  # one GPU per rank
            run.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", ranks.rank)))
        try:
            if ranks.is_writer:
                run.prepare_data()
            ranks.barrier()
            check_run_nproc(
                run.dir, run.config, ranks.world
            )  # on every rank: all of them stop, none waits for the others
            summary = stage_base(run, ranks)
            if ranks.is_writer:
                print(f"[base] {summary} ({ranks.world} processes)")
        finally:
            dist.destroy_process_group()
    except RedkitError as err:
        print(f"redkit: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
