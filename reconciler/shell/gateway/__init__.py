"""The gateway wing: each deployment's stable address, run by the reconciler.

``sync`` is what the loop calls each pass (which gateways run, their upstreams, the end-to-end
probe, the stops); ``host`` runs an nginx master on this host, ``job`` one in its own Slurm job
(``job_slurm``: its sbatch argv and squeue parsing); ``record`` reads ``gateway.json``;
``answering`` probes a running gateway end to end; ``holder_supervisor`` starts and adopts the
request holder (``reconciler/gateway/holder.py``) beside nginx, ``wake_eta`` tells it how long a
wake-up from zero takes; ``sweep`` ends every gateway process under a state directory that goes.
"""
