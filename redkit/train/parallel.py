"""Independent training chains side by side: one forked process, and one core, each.

The small modules of a life-cycle change train on one thread each (redkit/threads.py), so with two
or more cores a single chain of stages leaves the others idle. Two chains share nothing but their
inputs, the cached features: RED's (label rows, experts, router: the router reads only features
and domains) and the MoE baseline's (heads, then the gate over them). They run at once, each in a
forked process on one thread. Every module is seeded by itself, trained on one thread (as it is in
one process: redkit/threads.py) and written by its own process, so its weights are bit-identical
to training the chains one after the other (tested); only the wall time changes.

Sequential instead where forking is unsafe or useless: one core, no `fork` start method
(Windows), or a CUDA device (a forked child cannot use its parent's CUDA context).
"""

import multiprocessing
import os
import traceback
from collections.abc import Callable

import torch

from redkit.errors import RedkitError
from redkit.train.stages import STAGES, stage_line

Step = Callable[[], str]  # trains something, and says how it went in one line


def stage_step(run, stage: str, **kwargs) -> Step:
    """Stage `stage` of redkit/train/stages on `run` (it skips what exists) as a step."""
    return lambda: stage_line(stage, STAGES[stage](run, **kwargs))


def forks_help(run) -> bool:
    return (os.cpu_count() or 1) > 1 and "fork" in multiprocessing.get_all_start_methods() and run.device.type == "cpu"


def _child(run, steps: list[Step], connection) -> None:
    """In the forked process: the chain's steps in order; back to the parent go their lines and the
    seconds they added to the run's timings (the parent records them: two children writing
    timings.json would each drop the other's)."""
    # One core each; and a forked child must not enter an OpenMP parallel region its parent's runtime
    # (GNU libgomp) started: with one thread, torch runs every operation inline.
    torch.set_num_threads(1)
    before = dict(run.timings)
    try:
        lines = [step() for step in steps]
        added = {k: v - before.get(k, 0.0) for k, v in run.timings.items() if v != before.get(k, 0.0)}
        connection.send(("ok", lines, added))
    except BaseException as error:  # noqa: BLE001 - handed to the parent, which raises it
        try:
            connection.send(("error", error, traceback.format_exc()))
        except Exception:  # an exception that does not pickle: its text
            connection.send(("error", RedkitError(f"{type(error).__name__}: {error}"), traceback.format_exc()))
    finally:
        connection.close()


def run_chains(run, chains: list[list[Step]], print_fn=print) -> None:
    """Each chain's steps in order, the chains at once where forking helps (one after the other
    otherwise); prints every step's line, chain by chain. A failing chain's error is raised after
    the others have finished (each module is written atomically: a rerun skips what is done)."""
    chains = [c for c in chains if c]
    if len(chains) < 2 or not forks_help(run):
        for steps in chains:
            for step in steps:
                print_fn(step())
        return
    context = multiprocessing.get_context("fork")
    jobs = []
    for steps in chains:
        receive, send = context.Pipe(duplex=False)
        process = context.Process(target=_child, args=(run, steps, send))
        process.start()
        send.close()
        jobs.append((process, receive))
    messages = []
    for process, receive in jobs:
        try:
            message = receive.recv()
        except EOFError:  # killed before it could answer (out of memory, a signal)
            message = None
        process.join()
        messages.append(
            message
            or (
                "error",
                RedkitError(
                    f"a training process ended with exit code {process.exitcode} "
                    "before it finished; run the command again (finished modules are kept)"
                ),
                "",
            )
        )
    for kind, payload, detail in messages:
        if kind == "error":
            if detail:
                payload.add_note(f"raised in a training process:\n{detail}")
            raise payload
    for _, lines, added in messages:
        for stage, seconds in added.items():
            run.add_time(stage, seconds)
        for line in lines:
            print_fn(line)
