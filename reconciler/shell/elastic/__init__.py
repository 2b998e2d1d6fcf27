"""The elastic wing: the autoscaler's measurements and what it does with core/plan/autoscale's answer.

``autoscale`` reads the autoscaled workers' metrics when due, asks the pure
``core/plan/autoscale.py:compute_autoscale`` for each role's count, keeps its memory in
``state/<recipe>/autoscale.json`` and tells the gateway's holder about a wake-up;
``engine_metrics`` parses the engines' Prometheus pages into the numbers it reads.
"""
