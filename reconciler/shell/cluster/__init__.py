"""The cluster wing: what Slurm's nodes and queue say beyond the jobs and steps of a tick.

``nodes`` keeps the suspect nodes (``core/plan/nodes.py`` decides) and releases requeued
allocations; ``slurm_watch`` asks Slurm's slow questions (reservations, ``squeue --start``,
partitions) at a slow pace and keeps the quarantine; ``lost_allocs`` reports an allocation that
left the queue without our ``scancel``, in Slurm's words.
"""
