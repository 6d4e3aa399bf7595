"""The commands of the paper's experiments, registered into redkit's command line when redkit loads
its command plug-ins (the entry point `redkit.commands` of pyproject.toml). Each module only parses
flags: the work is imported when a command runs."""

from redkit_experiments.arithmetic import cli as arithmetic  # noqa: F401  (data, reproduce task1 / task2)
from redkit_experiments.digits import cli as digits  # noqa: F401  (reproduce digits)
from redkit_experiments.peers import cli as peers  # noqa: F401  (reproduce peers)
from redkit_experiments.routing import cli as routing  # noqa: F401  (analyze routing)
from redkit_experiments.spectra import cli as spectra  # noqa: F401  (reproduce spectra)
from redkit_experiments.steps import cli as steps  # noqa: F401  (reproduce steps / decomposer, add-expert)
from redkit_experiments.study import cli as study  # noqa: F401  (study ...)
from redkit_experiments.toy import cli as toy  # noqa: F401  (reproduce toy)
