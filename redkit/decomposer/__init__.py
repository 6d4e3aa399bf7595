"""The step decomposer (paper §4.2.7, §4.5.4): a question's text -> its step program, numbers
copied from the text, never computed. `reproduce_decomposer` trains and evaluates it end to end."""

from redkit.decomposer.model import (DecomposerHead, HeadConfig, StepDecomposer, decode,  # noqa: F401
                                     extract_numbers, number_positions)
from redkit.decomposer.train import (DecomposerConfig, alignment, decomposer_data, load_decomposer,  # noqa: F401
                                     reproduce_decomposer, score_programs, train_decomposer)
