"""Training: one loop (loop.py) serves every stage (stages/)."""
