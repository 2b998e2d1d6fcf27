"""The cluster config (``srtslurm.yaml``) watched like the manifests, while ``run`` runs.

``run`` found it (or none) at start; each pass looks again (one ``stat``; the README has the file
written while ``run`` already runs): a changed file is loaded and put in force — the recipes are
applied through it again, so a spec it changes rolls out — and an invalid one is refused with its
located error (log, event ``ClusterConfigInvalid``) while the one in force is kept. A file in force
that goes away is kept too (a save by delete-then-create must not change every spec), and said.

What is in force, by path and version (its text's sha256 and its mtime), is recorded in
``state/cluster-config.json``: ``run``'s start line, ``describe`` and the status page show it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from reconciler.drivers.state import StateDir
from reconciler.errors import RecipeError
from reconciler.recipe import cluster as cluster_config
from reconciler.recipe.cluster import Cluster
from reconciler.timefmt import iso

log = structlog.get_logger("reconciler")
from reconciler.config_record import FILE, line, recorded  # noqa: F401 - what run records, read back


@dataclass(frozen=True)
class Version:
    path: str  # absolute
    sha256: str  # of the text, first 12 hex digits
    mtime: float

    def describe(self) -> str:
        return f"{self.path} (sha256 {self.sha256}, modified {iso(self.mtime)})"


def version_of(path: str | Path, text: bytes, mtime: float) -> Version:
    return Version(str(Path(path).absolute()), hashlib.sha256(text).hexdigest()[:12], mtime)


class ClusterConfigWatch:
    def __init__(self, state: StateDir, cluster: Cluster | None, cwd: Path | None = None):
        self.state = state
        self.cluster = cluster  # in force
        self.cwd = (cwd or Path.cwd()).absolute()  # where run started: srtctl's search starts there
        self.version: Version | None = None
        self.error: str | None = None  # the last refused rewrite, located (cleared by a good one)
        self.on_change: Callable[[Cluster | None, Version | None], None] | None = None  # run: run.json
        self._seen: tuple | None = None
        self._recorded = False
        if cluster is not None:
            self._seen, self.version = self._look(Path(cluster.path))

    def path(self) -> Path | None:
        """The file to watch: the one in force, else the one srtctl's search would find now."""
        if self.cluster is not None:
            return Path(self.cluster.path)
        return cluster_config.find(None, self.cwd)

    def refresh(self) -> Cluster | None:
        """The cluster config in force after looking at its file once more."""
        if not self._recorded:  # the first pass of run: what it started with
            self._recorded = True
            self.record()
        path = self.path()
        sig, version = self._look(path) if path is not None else (None, None)
        if sig == self._seen:
            return self.cluster
        self._seen = sig
        if version is None:
            if self.cluster is not None:
                self._say_missing(path)
            return self.cluster
        if self.version is not None and version.sha256 == self.version.sha256 and self.error is None:
            return self.cluster  # touched, same text
        try:
            new = cluster_config.load(path, self.cwd)
        except RecipeError as e:
            self._refuse(version, e)
            return self.cluster
        old, self.cluster, self.version, self.error = self.version, new, version, None
        was = f"; was {old.describe()}" if old else "; there was none"
        log.info("cluster config in force", config=version.describe(), was=old.describe() if old else None)
        self.state.event("ClusterConfigLoaded", None, f"cluster config {version.describe()} in force{was}",
                         path=version.path)
        self.record()
        if self.on_change is not None:
            self.on_change(new, version)
        return new

    def describe(self) -> str:
        return self.version.describe() if self.version else "none"

    def follow(self, settings: dict, save: Callable[[], None]) -> None:
        """run's settings (run.json, which read commands take the config's path from, and the status
        page's header) follow what is in force; ``save`` writes run.json."""
        def changed(_cluster: Cluster | None, version: Version | None) -> None:
            settings.update(clusterConfig=version.path if version else None, clusterConfigInForce=self.describe())
            save()

        settings["clusterConfigInForce"] = self.describe()
        self.on_change = changed

    def record(self) -> None:
        """state/cluster-config.json: what is in force, and the last rewrite refused."""
        v = self.version
        self.state.write_json(self.state.root / FILE, {
            "path": v.path if v else None, "sha256": v.sha256 if v else None,
            "modified": iso(v.mtime) if v else None, "error": self.error})

    def _refuse(self, version: Version, e: RecipeError) -> None:
        msg = "; ".join(str(x) for x in (e, *getattr(e, "more", ())))
        self.error = msg
        kept = self.describe()
        log.error("cluster config refused; the one in force is kept", error=msg, kept=kept)
        self.state.event("ClusterConfigInvalid", None, f"{msg}; kept in force: {kept}", path=version.path)
        self.record()

    def _say_missing(self, path: Path | None) -> None:
        kept = self.describe()
        log.warning("cluster config file gone; the one in force is kept", path=str(path), kept=kept)
        self.state.event("ClusterConfigMissing", None, f"{path} is gone; kept in force: {kept}", path=str(path))

    def watch(self, stop, wake: Callable[[], None]) -> None:
        """Wake the loop when the file changes (its directory watched: a save may replace it); the
        pass after looks (``refresh``). Without it the resync still sees the change."""
        import watchfiles

        path = self.path() or self.cwd / cluster_config.FILE_NAME
        try:
            for changes in watchfiles.watch(path.parent, debounce=200, step=50, stop_event=stop,
                                            yield_on_timeout=False, raise_interrupt=False, recursive=False):
                if any(Path(p).name == path.name for _, p in changes):
                    wake()
        except Exception as e:  # noqa: BLE001 - the resync still sees the change
            log.warning("cluster config watcher stopped; relying on resync", error=str(e))

    @staticmethod
    def _look(path: Path) -> tuple[tuple | None, Version | None]:
        """(stat signature, version) of the file, (None, None) when it cannot be read."""
        try:
            st = os.stat(path)
            text = path.read_bytes()
        except OSError:
            return None, None
        return (st.st_ino, st.st_size, st.st_mtime_ns), version_of(path, text, st.st_mtime)
