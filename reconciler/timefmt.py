"""Timestamps as people and status files read them."""

from __future__ import annotations

import time


def iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
