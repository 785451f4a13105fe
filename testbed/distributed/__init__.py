"""A sweep beyond one machine: its points as Ray tasks (``ray_sweep``) or a SLURM job array
(``slurm``)."""
