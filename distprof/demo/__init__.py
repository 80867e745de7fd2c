"""The embedded default job: a numpy MLP trained data-parallel over MPI (no GPU needed)."""
