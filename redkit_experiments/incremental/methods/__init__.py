"""The methods of the incremental study, registered in METHODS by importing their modules."""

# isort: skip_file

from redkit_experiments.incremental.methods.base import METHODS, Kept, Method, Setting, register_method  # noqa: F401
from redkit_experiments.incremental.methods import red, red_tuned, frozen, finetune, ewc, lwf, replay  # noqa: F401
from redkit_experiments.incremental.methods import klda, ranpac, prototypes, aper, ease  # noqa: F401
