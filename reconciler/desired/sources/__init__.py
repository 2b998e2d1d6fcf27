"""Unit sources: one per kind of process, one interface (``base.Source``), listed once in start
order in ``desired/build.py``."""
