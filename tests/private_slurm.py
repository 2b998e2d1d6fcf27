"""A Slurm of one test's own: its slurmctld and slurmd, config, ports and state in a directory.

The dev Slurm (scripts/slurm-dev.sh) is shared by every test running at once, so no test may
restart its controller. A fault that is the controller's own — slurmctld restarted with fresh
state, every job and step forgotten (issue 27) — runs here instead: a second cluster on this
machine (its own ClusterName, ports and spool directories; the node is this host, reached on
127.0.0.1, so step addresses resolve as on the dev Slurm), reached with ``SLURM_CONF``.
Needs root (slurmd), slurm-wlm and a running munged — what scripts/slurm-dev.sh up provides.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from helpers import wait_until


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def available() -> str | None:
    """Why a private Slurm cannot run here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root (slurmd)"
    for tool in ("/usr/sbin/slurmctld", "/usr/sbin/slurmd"):
        if not os.access(tool, os.X_OK):
            return f"{tool} missing (apt-get install slurm-wlm)"
    if not Path("/run/munge/munge.socket.2").exists():
        return "munged not running (scripts/slurm-dev.sh up)"
    return None


class PrivateSlurm:
    def __init__(self, root: Path, gpus: int = 8, cpus: int = 16):
        self.root = root
        self.host = socket.gethostname().split(".")[0]
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.ctld: subprocess.Popen | None = None
        self.slurmd: subprocess.Popen | None = None
        for d in ("state", "spool", "logs", "gpu"):
            (root / d).mkdir(parents=True, exist_ok=True)
        for i in range(gpus):
            (root / "gpu" / f"gpu{i}").symlink_to("/dev/null")
        ctl_port, d_port = _free_port(), _free_port()
        self.conf.write_text(f"""\
ClusterName=rcl-private-{ctl_port}
SlurmctldHost={self.host}(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort={ctl_port}
SlurmdPort={d_port}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/logs/slurmctld.log
SlurmdLogFile={root}/logs/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
MpiDefault=none
SwitchType=switch/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=60
KillWait=5
GresTypes=gpu
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=8000 Gres=gpu:{gpus} State=UNKNOWN
PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")
        (root / "gres.conf").write_text(
            f"AutoDetect=off\nNodeName={self.host} Name=gpu File={root}/gpu/gpu[0-{gpus - 1}]\n")

    def _sh(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=30, env=self.env)

    def start(self, fresh: bool = False) -> None:
        """slurmctld (``fresh``: its saved state cleared, every job forgotten) and, once, slurmd."""
        log = open(self.root / "logs" / "daemons.out", "ab")
        self.ctld = subprocess.Popen(["/usr/sbin/slurmctld", "-D", "-i", *(["-c"] if fresh else [])],
                                     env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(lambda: "is UP" in self._sh("scontrol", "ping").stdout, timeout=30,
                   what=f"private slurmctld up ({self.log('slurmctld')[-1500:]})")
        if self.slurmd is None:
            self.slurmd = subprocess.Popen(["/usr/sbin/slurmd", "-D"], env=self.env, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(lambda: self._sh("sinfo", "-h", "-o", "%T").stdout.strip() in ("idle", "mixed", "allocated"),
                   timeout=60, what=f"private node usable ({self.log('slurmd')[-1500:]})")

    def stop_controller(self) -> None:
        if self.ctld is not None and self.ctld.poll() is None:
            self.ctld.send_signal(signal.SIGTERM)
            self.ctld.wait(30)

    def restart_fresh(self) -> None:
        """The controller restarted with fresh state: every job and step it knew is gone (its node
        kills what it still runs of them once it registers)."""
        self.stop_controller()
        shutil.rmtree(self.root / "state")
        (self.root / "state").mkdir()
        self.start(fresh=True)

    def log(self, daemon: str) -> str:
        try:
            return (self.root / "logs" / f"{daemon}.log").read_text(errors="replace")
        except OSError:
            return ""

    def jobs(self) -> list[str]:
        return self._sh("squeue", "-h", "-o", "%i").stdout.split()

    def down(self) -> None:
        for j in self.jobs():
            self._sh("scancel", j)
        if self.jobs():
            wait_until(lambda: not self.jobs(), timeout=30, what="private jobs gone")
        for p in (self.slurmd, self.ctld):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)


@contextlib.contextmanager
def running(root: Path, monkeypatch: pytest.MonkeyPatch, gpus: int = 8):
    """A started private Slurm that this process's squeue/scancel and the harness's reconciler
    reach (SLURM_CONF); skipped where it cannot run, failed instead under RECONCILER_REQUIRE_SLURM=1."""
    why = available()
    if why:
        if os.environ.get("RECONCILER_REQUIRE_SLURM") == "1":
            pytest.fail(f"RECONCILER_REQUIRE_SLURM=1 but a private Slurm cannot run: {why}")
        pytest.skip(why)
    s = PrivateSlurm(root, gpus=gpus)
    s.start()
    monkeypatch.setenv("SLURM_CONF", str(s.conf))
    try:
        yield s
    finally:
        s.down()
