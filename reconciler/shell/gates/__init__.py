"""The gates wing: measurements a rollout or an operator waits on.

``analysis_runs`` runs the rollout analysis the plan asks for (``python -m reconciler.benchrun`` at
one life's own address, one at a time per recipe) and reads the finished runs back as facts for
the pure ``core/plan/analysis.py``; ``bench_results`` reads a deployment's ``reconcile.benchmark``
runs as the step left them, for ``describe``, ``get``, ``benchmarks NAME`` and the metrics.
"""
