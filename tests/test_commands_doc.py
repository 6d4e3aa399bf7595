"""Every command of docs/guides/commands.md, run once on tiny settings, so that a moved module, a renamed
folder or a flag the page still shows breaks the suite and not a user.

    test_every_flag_on_the_page_exists          each line's command (and sub-command) is registered and takes
                                                every flag the line shows
    test_the_sweep_covers_every_line            each line has its tiny invocation below (SWEEP), or names the
                                                test file that runs it (ELSEWHERE) and still does
    test_the_sweep_runs                         the tiny invocations, in the page's order, on one tiny Task 1 run

A line added to the page without a tiny invocation fails the second test.
"""

import argparse
import re
import shutil
from pathlib import Path

import pytest
from conftest import TINY_RUN_ARGS, run_cli

from redkit.cli.command import COMMANDS
from redkit.fitting.topics import write_clinc_format
from redkit.plugins import load_commands

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "guides" / "commands.md"

load_commands()


def page_lines() -> list[str]:
    """The command lines of the page's code block, comments cut, spaces folded."""
    block = PAGE.read_text().split("```bash\n", 1)[1].split("```", 1)[0]
    return [" ".join(line.split("#", 1)[0].split()) for line in block.splitlines() if line.strip()]


# Lines run by the sweep itself: the page's line -> its tiny invocation ({run}: a copy of the tiny Task 1
# run, built once per session with `reproduce task1 --n 400 --max-epochs 1`; {tmp}: a scratch directory).
TINY = list(TINY_RUN_ARGS)
SWEEP = {
    "redkit data task1 --out data/task1 [--n 80000] [--seed 0] [--split structure|random]": [
        "data",
        "task1",
        "--out",
        "{tmp}/data",
        "--n",
        "400",
        "--split",
        "random",
    ],
    "redkit reproduce task1 [--split structure|random] [--backbone PATH] [--out runs/task1] [--eval FILE.jsonl ...]": [
        "reproduce",
        "task1",
        *TINY,
        "--out",
        "{run}",
        "--eval",
        "{run}/data/test.jsonl",
    ],
    "redkit reproduce task2 [same flags]": ["reproduce", "task2", *TINY, "--out", "{tmp}/task2"],
    "redkit reproduce decomposer [--out runs/decomposer] [--task decomposer_times] [--tune-top]": [
        "reproduce",
        "decomposer",
        *TINY,
        "--out",
        "{tmp}/decomposer",
    ],
    "redkit train experts --run runs/task1 --domain R3 --kind residual": [
        "train",
        "experts",
        "--run",
        "{run}",
        "--domain",
        "R3",
        "--kind",
        "residual",
        "--retrain",
    ],
    "redkit train experts --run runs/task1 --domain R1 --precision bf16": [
        "train",
        "experts",
        "--run",
        "{run}",
        "--domain",
        "R1",
        "--precision",
        "bf16",
        "--retrain",
    ],
    "redkit train base --run runs/task1 --nproc 2": ["train", "base", "--run", "{run}", "--nproc", "2"],
    "redkit eval --run runs/task1 --data FILE.jsonl [--composition red]": [
        "eval",
        "--run",
        "{run}",
        "--data",
        "{run}/data/test.jsonl",
        "--composition",
        "red",
    ],
    'redkit predict --run runs/task1 "What is 12 plus 27?" "What is 40 minus 3?"': [
        "predict",
        "--run",
        "{run}",
        "What is 12 plus 27?",
        "What is 40 minus 3?",
    ],
    "redkit predict --run runs/task1 --file questions.txt": ["predict", "--run", "{run}", "--file", "{tmp}/q.txt"],
    "redkit reproduce task1 --experts 10": ["reproduce", "task1", *TINY, "--experts", "10", "--out", "{tmp}/k10"],
    "redkit study noise --run runs/task1 [--composition red ...] [--model misroute ...] [--draws 20]": [
        "study",
        "noise",
        "--run",
        "{run}",
        "--composition",
        "red",
        "--model",
        "misroute",
        "--draws",
        "2",
    ],
    "redkit study ablation --run runs/task1 [--part rank|correction|experts ...] [--with-base]": [
        "study",
        "ablation",
        "--run",
        "{run}",
        "--part",
        "rank",
        "--part",
        "correction",
    ],
    "redkit reproduce task1 --router spectra": [
        "reproduce",
        "task1",
        *TINY,
        "--router",
        "spectra",
        "--out",
        "{tmp}/sp",
    ],
    "redkit report --run runs/task1": ["report", "--run", "{run}"],
    "redkit study seeds --task clinc150 --seeds 3": [
        "study",
        "seeds",
        "--task",
        "clinc150",
        "--data",
        "{tmp}/clinc",
        "--seeds",
        "2",
        "--max-epochs",
        "1",
        "--out",
        "{tmp}/seeds-clinc",
    ],
}

# Lines whose tiny run lives in another test file (it builds what they need: a steps run, a server, a fit run
# with domains added, processes): the file, and the words of the invocation it must still hold (the command
# line, or for the levers study the function its command calls with smaller grids).
ELSEWHERE = {
    # seconds each (an ONNX export, the complexity study's timings, a study of two seeds), already run by these tests
    "redkit export --run runs/mine --out bundles/mine": (
        "test_lifecycle.py",
        '["export", "--run", world["run"], "--out", bundle]',
    ),
    'redkit predict --bundle bundles/mine "freeze my card"': ("test_federated.py", '["predict", "--bundle", str('),
    "redkit study complexity --run runs/task1 [--repeats 50]": (
        "test_study.py",
        '["study", "complexity", "--run", str(run), "--repeats", "2"]',
    ),
    "redkit study seeds --task task1|task2|digits --seeds 5 [--out runs/seeds-task1]": (
        "test_study.py",
        '["study", "seeds", "--task", "task1", "--seeds", "2"',
    ),
    "redkit reproduce steps [--out runs/steps] [--programs 80000] [--eval FILE.jsonl ...]": (
        "test_steps.py",
        '"reproduce", "steps"',
    ),
    "redkit add-expert --run runs/steps --operation mul": ("test_steps.py", '"add-expert"'),
    "redkit hash-token --token-env ACME_TOKEN": (
        "test_upload_hardening.py",
        '"hash-token", "--token-env", "ACME_TOKEN"',
    ),
    "redkit federate --runtime deployment --netns --out RUN": (
        "test_federated_deployment.py",
        "OwnersNetwork(",
    ),
    "redkit fit --data DIR --out RUN --recipe replay-free": ("test_replay_free_recipe.py", '"--recipe", "replay-free"'),
    "redkit fit --data DIR --out RUN --recipe replay-free --owner-experts tuned": (
        "test_tuned_owners.py",
        '"--recipe", "replay-free", "--owner-experts", "tuned"',
    ),
    "redkit reproduce task1 --nproc 2": ("test_distributed.py", '"--nproc", "2"'),
    "torchrun --nproc_per_node 2 -m redkit.train.distributed runs/task1": (
        "test_distributed.py",
        '"torch.distributed.run",',
    ),
    "redkit serve --bundle bundles/mine [--port 8000] [--workers N]": ("test_serve.py", '"serve", "--bundle"'),
    "redkit serve --run runs/mine --experts-dir experts/ --admin-token-env REDKIT_ADMIN_TOKEN": (
        "test_serve.py",
        '"--experts-dir"',
    ),
    'redkit predict --run runs/steps "If you subtract 5 from 12 and add 9, what do you get?"': (
        "test_steps.py",
        '"predict", "--run"',
    ),
    "redkit reproduce digits [--run red|moe|all] [--data_dir MNIST_IDX_DIR] [--out runs/digits] [--seed 0] ...": (
        "test_digits.py",
        '"reproduce", "digits"',
    ),
    "redkit reproduce toy [--out runs/toy]": ("test_digits.py", '"reproduce", "toy"'),
    "redkit analyze routing --run runs/task1 [--router switch ...] [--part metrics|stability|scaling|overhead ...] [--seeds 3] [--experts 4 ...]": (
        "test_routing_analysis.py",
        '["analyze", "routing", "--run", run]',
    ),
    "redkit add-expert --run runs/steps --operation mul --router prototype": (
        "test_steps.py",
        '"--router", "prototype"',
    ),
    "redkit reproduce peers --task task1|task2 [--out RUN] [--lora-rank 8] [--examples-per-expert 4000]": (
        "test_peers.py",
        '"reproduce", "peers"',
    ),
    "redkit fit --data DIR --out RUN [--oos FILE]": ("test_fit.py", '"fit", "--data"'),
    "redkit reproduce clinc150 [--data DIR] [--out runs/clinc150]": ("test_clinc150.py", '"reproduce", "clinc150"'),
    "redkit study levers --run RUN [--replicate RUN2 ...]": ("test_clinc150.py", "run_levers_study("),
    "redkit add-domain --run RUN --data NEWDIR [--out RUN2]": ("test_lifecycle.py", '"add-domain"'),
    "redkit remove-domain --run RUN --domain NAME [--out RUN2]": ("test_lifecycle.py", '"remove-domain"'),
    "redkit train-expert --bundle BUNDLE --data NEWDIR --out EXPERT": ("test_lifecycle.py", '"train-expert"'),
    "redkit add-domain --run RUN --expert EXPERT": ("test_lifecycle.py", '"--expert"'),
    "redkit add-domain --run RUN --data NEWDIR --router gaussian": (
        "test_replay_free_lifecycle.py",
        '"--router", "gaussian"',
    ),
    "redkit train-expert --bundle BUNDLE --data NEWDIR --out EXPERT --modules-only": (
        "test_replay_free_lifecycle.py",
        '"--modules-only"',
    ),
    "redkit study lifecycle --run RUN": ("test_lifecycle.py", '"study", "lifecycle"'),
    "redkit reproduce spectra [--experts 8] [--steps N] [--seeds 3] [--sweep 4,8,16,32]": (
        "test_spectra.py",
        '"reproduce", "spectra"',
    ),
    "redkit federate [--data DIR] --out RUN [--rounds 10] [--runtime deployment] [--push URL]": (
        "test_federated.py",
        '"federate"',
    ),
    "redkit federate --owner-experts tuned --out RUN": (
        "test_tuned_owners.py",
        '"federate", "--owner-experts", "tuned"',
    ),
    "redkit federate --secure-aggregation --out RUN": ("test_federated.py", '[*args, "--secure-aggregation"]'),
    "redkit federate --baseline-only --strategy fedadam --local-lr 1e-3 --local-epochs 1 --server-lr 1e-3 --patience 3 --rounds 50 --out RUN": (
        "test_federated.py",
        '[*args, "--baseline-only", "--no-one-machine"]',
    ),
    "redkit study incremental --out DIR [--data DIR] [--protocol domains|classes] [--order N] [--method red ...]": (
        "test_incremental.py",
        '"study", "incremental"',
    ),
    "redkit study incremental-tune --out DIR [--order 3] [--steps 3] [--method ewc ...] [--save]": (
        "test_incremental.py",
        '"study", "incremental-tune"',
    ),
}


def _parser(line: str) -> argparse.ArgumentParser:
    """The parser of the line's command, or of its sub-command for reproduce, study and analyze."""
    words = line.split()
    command = COMMANDS[words[1]]
    parser = argparse.ArgumentParser()
    if command.group:
        from redkit.cli.reproduce import BENCHMARKS
        from redkit_experiments.routing.cli import ANALYSES
        from redkit_experiments.study.cli import STUDIES

        registry = {"reproduce": BENCHMARKS, "study": STUDIES, "analyze": ANALYSES}[words[1]]
        registry[words[2]][0](parser)
    else:
        command.options(parser)
    return parser


@pytest.mark.parametrize("line", [line for line in page_lines() if line.startswith("redkit ")])
def test_every_flag_on_the_page_exists(line):
    known = {option for action in _parser(line)._actions for option in action.option_strings}
    shown = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9_-]*", line))
    assert shown <= known, f"{line}: {sorted(shown - known)} not taken by the command"


def test_the_sweep_covers_every_line():
    lines = page_lines()
    assert set(lines) == set(SWEEP) | set(ELSEWHERE), (
        f"on the page without a tiny run: {sorted(set(lines) - set(SWEEP) - set(ELSEWHERE))}; "
        f"swept but no longer on the page: {sorted((set(SWEEP) | set(ELSEWHERE)) - set(lines))}"
    )
    for line, (file, words) in ELSEWHERE.items():
        assert words in (ROOT / "tests" / file).read_text(), f"{file} no longer runs {line!r} ({words})"


def test_the_sweep_runs(tiny_run, tmp_path, capsys):
    run = shutil.copytree(tiny_run, tmp_path / "run")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "q.txt").write_text("What is 12 plus 27?\n\nWhat is 40 minus 3?\n")
    write_clinc_format(scratch / "clinc")  # a tiny set in CLINC150's layout
    for line in page_lines():
        if line not in SWEEP:
            continue
        argv = [word.format(run=run, tmp=scratch) for word in SWEEP[line]]
        code, out, err = run_cli(argv, capsys)
        assert code == 0, f"{line}\n  ran as: redkit {' '.join(argv)}\n  {err.strip()[-500:]}"
