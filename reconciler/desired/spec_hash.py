"""What identifies a spec: one sorted-keys JSON encoder, and a unit's spec hash from it (a
running step's label carries it; a change of it is a rollout)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from reconciler.world import Launch

# json.dumps(doc, sort_keys=True) makes a new encoder per call; a spec hash is taken per unit per
# build, so the one encoder (the same output: an immutable configuration, not state) is made once
SORTED_JSON = json.JSONEncoder(sort_keys=True)


def spec_hash(
    launches: tuple[Launch, ...], container: str | None, files: Mapping[str, str],
    srun_options: tuple[tuple[str, str], ...] = (),
) -> str:
    # tuples encode as the JSON arrays lists do, and the encoder sorts every mapping's keys: the
    # document is the same text without copying each argv and environment into lists first
    doc = {
        "launches": [(l.rank, l.ntasks, l.mpi, l.argv, l.env) for l in launches],
        "container": container,
        "files": dict(files),
    }
    if srun_options:
        doc["srun"] = srun_options
    return hashlib.sha256(SORTED_JSON.encode(doc).encode()).hexdigest()[:10]
