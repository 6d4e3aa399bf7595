"""The step decomposer (paper §4.2.7, §4.5.4): a question's text -> its step program, numbers
copied from the text, never computed. `reproduce_decomposer` trains and evaluates it end to end."""

from redkit_experiments.decomposer.evaluate import score_programs  # noqa: F401
from redkit_experiments.decomposer.model import (  # noqa: F401
    DecomposerHead,
    HeadConfig,
    StepDecomposer,
    decode,
    extract_numbers,
    number_positions,
)
from redkit_experiments.decomposer.targets import alignment  # noqa: F401
from redkit_experiments.decomposer.train import (  # noqa: F401
    DecomposerConfig,
    decomposer_data,
    load_decomposer,
    reproduce_decomposer,
    train_decomposer,
)
