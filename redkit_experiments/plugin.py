"""What the experiments register in redkit's registries when redkit loads its plug-ins: the
arithmetic tasks and the run kinds task1, task2, steps and digits. Listings show the tasks in the
order they register, hence no import sorting here."""

# isort: skip_file

from redkit_experiments.arithmetic import task1, task2, operations, decomposer_data  # noqa: F401
from redkit_experiments.arithmetic import run as arithmetic_run  # noqa: F401  (task1, task2)
from redkit_experiments.digits import run as digits_run  # noqa: F401  (digits)
from redkit_experiments.steps import run as steps_run  # noqa: F401  (steps)
