"""`redkit reproduce BENCHMARK [its flags]`: the group of benchmarks run end to end. The library's is
CLINC150 (redkit/cli/reproduce_clinc150.py); the paper's benchmarks register themselves from the
redkit_experiments plug-in (task1, task2, steps, decomposer, digits, toy, peers, spectra)."""

from redkit.cli.command import group

BENCHMARKS = group(
    "reproduce",
    "benchmark",
    help="run a benchmark end to end and print its tables",
    description="Run a benchmark end to end. `redkit reproduce BENCHMARK --help` lists its flags.",
)
