"""Stand-in for one GPU Memory Service server (``python3 -m gpu_memory_service --device k``).

The real server needs a GPU: it owns CUDA VMM allocations and serves them on two Unix
sockets per device, named after the GPU's NVML UUID, in ``$GMS_SOCKET_DIR``. This one
binds the same two sockets (a fake UUID of a real one's length, derived from the device index
and the ``CUDA_VISIBLE_DEVICES`` the supervisor pinned) and holds them until SIGTERM, so the
reconciler's supervisor script, readiness gate, pinning and relaunches run for real.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", type=int, required=True)
    args = ap.parse_args()
    directory = os.environ["GMS_SOCKET_DIR"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    physical = visible[args.device] if args.device < len(visible) and visible[0] else str(args.device)
    uuid = f"GPU-00000000-0000-0000-0000-{int(physical):012d}"  # a real UUID's length: the path limit applies
    held = []
    for pool in ("weights", "kv_cache"):
        path = os.path.join(directory, f"gms_{uuid}_{pool}.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        s.listen(8)
        held.append(s)
        print(f"Socket path: {path}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
