"""Replay-free recomposition: what each owner contributes from its own data alone (owner.py: an expert, its
label rows, its classes' statistics), quantities that add up exactly across owners (statistics.py), and the
model they assemble into without anyone's data (model.py: the Gaussian router of gaussian.py on the random
features of projection.py)."""
