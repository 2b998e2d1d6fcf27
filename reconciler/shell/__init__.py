"""The imperative edge: files, the driver, probes and logs in; actions, state/ and logs out.

Nothing here decides: every policy is in ``reconciler.core``. A tick gathers facts
(``observe``), asks the core for a plan, executes it (``execute``) and records what
happened (``record``); ``loop`` runs ticks until stopped.
"""
