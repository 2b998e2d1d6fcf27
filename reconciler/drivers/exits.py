"""Wake the loop when a process the reconciler started ends (a step's srun client, a local
worker, a gateway's nginx master).

Without it a step's end is seen at the next tick — up to the resync later (measured: a killed
frontend was relaunched 0.83 s after the kill with ``--resync 1``, most of the only frontend's
gap). A pidfd is readable once its process is gone; one thread waits on all of them, so many
steps cost one thread, not one each; at most MAX_WATCHED descriptors are held (a login node's
soft limit is often 1024), beyond that a step's end is seen by the tick as before. Only the
processes launched by this reconciler are watched: a step adopted after a restart is too.
"""

from __future__ import annotations

import os
import queue
import selectors
import threading
from collections.abc import Callable

import structlog

log = structlog.get_logger("reconciler")
MAX_WATCHED = 256
AGAIN_S = 0.5


class ExitWatch:
    def __init__(self) -> None:
        self.wake: Callable[[], None] | None = None  # set by the loop; None: nothing to wake
        self._new: queue.SimpleQueue[tuple[int, Callable[[], None] | None]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._poke_r, self._poke_w = -1, -1
        self._count = 0  # descriptors held (the watcher thread's alone)

    def watch(self, pid: int, ended: Callable[[], None] | None = None) -> None:
        """Wake the loop when ``pid`` exits (from any thread; returns at once); ``ended`` is called
        first (on the watcher thread), when it was watched."""
        if self.wake is None:
            return
        self._start()
        self._new.put((pid, ended))
        try:
            os.write(self._poke_w, b"\0")
        except BlockingIOError:
            pass  # the pipe is full of pokes already: the watcher is about to read the queue

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._poke_r, self._poke_w = os.pipe()
            os.set_blocking(self._poke_w, False)
            self._thread = threading.Thread(target=self._run, name="exit-watch", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._poke_r, selectors.EVENT_READ, None)
        while True:
            for key, _ in sel.select():
                if key.data is None:  # new pids to watch
                    os.read(self._poke_r, 4096)
                    while not self._new.empty():
                        self._add(sel, *self._new.get())
                    continue
                sel.unregister(key.fd)
                os.close(key.fd)
                self._count -= 1
                self._ended(key.data[1])

    def _ended(self, ended: Callable[[], None] | None) -> None:
        if ended is not None:
            try:
                ended()
            except Exception:  # noqa: BLE001 - one callback's fault must not end the watching of all the others
                log.exception("exit callback failed")
        if self.wake is None:
            return
        try:
            self.wake()
            # the srun client may end a moment before slurmctld's squeue drops the step: one more
            # look shortly after, rather than at the resync
            again = threading.Timer(AGAIN_S, self.wake)
            again.daemon = True
            again.start()
        except Exception:  # noqa: BLE001 - e.g. no thread left for the timer: the tick still sees the end
            log.exception("exit wake-up failed")

    def _add(self, sel: selectors.BaseSelector, pid: int, ended: Callable[[], None] | None) -> None:
        if self._count >= MAX_WATCHED:
            return
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            self._ended(ended)  # gone already: its end is news too
            return
        except OSError as e:  # out of descriptors, or no pidfd (Linux < 5.3): the tick still sees it
            log.debug("exit not watched", pid=pid, error=str(e))
            return
        sel.register(fd, selectors.EVENT_READ, (pid, ended))
        self._count += 1


__all__ = ["ExitWatch"]
