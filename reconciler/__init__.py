"""reconciler: keep srt-slurm recipes converged on Slurm."""

__version__ = "0.1.0"
