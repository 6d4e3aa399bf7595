"""Domains that arrive one at a time (class-incremental learning), RED without replay beside the methods
continual-learning researchers use: `redkit study incremental` (study.py; docs/results/incremental.md)."""
