"""The phases of a vLLM start, read from vLLM's own log lines (lines of a real vLLM 0.32 log)."""

from __future__ import annotations

from datetime import datetime

from reconciler.backends.vllm import start_phases

LOG = """\
Triton is installed, but doesn't include CPU backend. Disabling Triton.
(APIServer pid=525) INFO 12-06 23:47:52 [api_utils.py:286] non-default args: {'model_tag': '/tmp/tl'}
(Worker pid=4699) INFO 12-06 23:49:59 [base_loader.py:82] Initializing model took 1.370217 seconds
(Worker pid=4699) INFO 12-06 23:50:00 [default_loader.py:501] Loading weights took 0.04 seconds
(EngineCore pid=2604) INFO 12-06 23:51:48 [core.py:402] init engine (profile, create kv cache, warmup model) took 105.58 s
(APIServer pid=525) INFO 12-06 23:51:50 [entry.py:140] Starting vLLM server on http://0.0.0.0:21000
"""


def test_the_phases_of_a_start():
    got = start_phases(LOG, 2026)
    assert got == {"first_line": datetime(2026, 12, 6, 23, 47, 52).timestamp(), "load": 0.04, "warmup": 105.58}


def test_a_start_still_under_way_shows_only_what_happened():
    partial = "\n".join(LOG.splitlines()[:3])
    assert set(start_phases(partial, 2026)) == {"first_line"}
    assert start_phases("Triton is installed, but doesn't include CPU backend.\n", 2026) == {}
