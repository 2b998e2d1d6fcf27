"""The benchmark step (python -m reconciler.benchrun): aiperf runs, one summary, a verdict."""
