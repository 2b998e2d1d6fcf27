#!/usr/bin/env bash
# slurm-dev.sh up|down|status — a real single-node Slurm for development and CI.
#
# Debian 12 (slurm-wlm 22.05), as root, no systemd: installs slurm-wlm + munge when
# missing, writes a one-node config with fake GPUs, starts munged, slurmctld and
# slurmd, and waits until the node takes jobs. Idempotent. `down` stops only the
# daemons this script started (pid records in $REC_DIR, checked against /proc comm),
# never anything by name.
#
# Environment knobs:
#   SLURM_CPUS      CPUs advertised (default 64; oversubscribes the real cores)
#   SLURM_GPUS      fake GPUs for --gres=gpu:N (default 32: room for the test suite's parallel
#                   workers, each test's allocation asking for up to 8; 0 = none)
#   SLURM_PARTITION partition name (default debug)
#   SLURM_TIMEOUT   seconds to wait for each stage (default 60)
#   SLURM_FRESH=1   start slurmctld with -c: forget jobs left in its saved state by a
#                   previous run (CI: a stale job holding the fake GPUs would block tests)
#
# Facts this relies on (each one cost someone an afternoon):
# - slurmctld refuses to start unless SlurmctldHost is this machine's short hostname,
#   and that name must resolve: we add it to /etc/hosts when it does not.
# - SlurmdParameters=config_overrides lets slurmd register more CPUs than the box has.
# - gres/gpu in 22.05 drops GPUs without File= and rejects non-device files, so each
#   fake GPU is a distinct symlink to /dev/null (a character device).
# - SchedulerParameters=batch_sched_delay=0 makes sbatch jobs start without the
#   default few-second batching delay.
# - a package postinst would try to start the services: policy-rc.d blocks that.
# - daemons must not inherit our stdout/stderr pipes, or a CI step waiting on the pipe
#   never ends: they are started with every fd beyond 0-2 closed and output to a log.
# - slurmctld (user slurm) cannot remove its pid file in /run; we remove it after stop.
set -euo pipefail

CMD=${1:-up}
HOST=$(hostname -s)
CPUS=${SLURM_CPUS:-64}
GPUS=${SLURM_GPUS:-32}
PART=${SLURM_PARTITION:-debug}
TIMEOUT=${SLURM_TIMEOUT:-60}

ETC=/etc/slurm
SPOOL_CTLD=/var/spool/slurmctld
SPOOL_D=/var/spool/slurmd
GPU_DIR=$SPOOL_D/fake-gpus
LOGS=/var/log/slurm
REC_DIR=/run/reconciler-slurm-dev
CTLD_PID=/run/slurmctld.pid
SLURMD_PID=/run/slurmd.pid
MUNGE_PID=/run/munge/munged.pid
TAG="# written by reconciler scripts/slurm-dev.sh"
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

say() { echo "[slurm-dev $(date +%T)] $*"; }
die() { echo "[slurm-dev $(date +%T)] ERROR: $*" >&2; exit 1; }

pid_of() { # PIDFILE COMM -> pid when alive with that comm
  local p; p=$(tr -dc 0-9 2>/dev/null <"$1" || true)
  [ -n "$p" ] && [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "$2" ] && echo "$p"
}

launch() { # LOG CMD... ; detached, no inherited fds
  local logf=$1; shift
  (
    for fd in /proc/$BASHPID/fd/*; do
      fd=${fd##*/}
      case $fd in 0|1|2) ;; *) eval "exec $fd>&-" 2>/dev/null || true ;; esac
    done
    exec "$@" </dev/null >>"$logf" 2>&1
  )
}

poll() { # CMD... ; every 0.2 s until it succeeds or TIMEOUT
  local end=$((SECONDS + TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || return 1
    sleep 0.2
  done
}

install_packages() {
  if [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && [ -x /usr/bin/sbatch ] && [ -x /usr/sbin/munged ]; then
    return 0
  fi
  say "installing slurm-wlm and munge (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  local made=0 rc=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; made=1
  fi
  { apt-get update -q >/tmp/slurm-dev-apt.log 2>&1 &&
    apt-get install -y -q --no-install-recommends slurm-wlm munge >>/tmp/slurm-dev-apt.log 2>&1; } || rc=$?
  [ $made = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ $rc = 0 ] || { tail -20 /tmp/slurm-dev-apt.log >&2; die "apt-get failed ($rc); log in /tmp/slurm-dev-apt.log"; }
}

write_config() { # sets CHANGED=1 when a file changed
  CHANGED=0
  getent hosts "$HOST" >/dev/null || { say "adding $HOST to /etc/hosts"; echo "127.0.0.1 $HOST" >>/etc/hosts; }
  id slurm >/dev/null 2>&1 || die "user 'slurm' is missing (broken slurm-wlm install?)"
  install -d -m 0755 "$ETC" "$REC_DIR" "$SPOOL_D" "$GPU_DIR"
  install -d -o slurm -g slurm -m 0755 "$SPOOL_CTLD" "$LOGS"
  install -d -o munge -g munge -m 0700 /etc/munge /var/log/munge
  install -d -o munge -g munge -m 0711 /var/lib/munge
  install -d -o munge -g munge -m 0755 /run/munge
  if [ ! -s /etc/munge/munge.key ]; then
    say "creating a munge key"
    mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null ||
      dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
  fi
  chown munge:munge /etc/munge/munge.key; chmod 0600 /etc/munge/munge.key
  local i
  for ((i = 0; i < GPUS; i++)); do ln -sfn /dev/null "$GPU_DIR/gpu$i"; done

  local mem gres_types="" gres_node=""
  mem=$(awk '/^MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
  if [ "$GPUS" -gt 0 ]; then gres_types="GresTypes=gpu"; gres_node="Gres=gpu:$GPUS"; fi
  local conf gres
  conf=$(mktemp); gres=$(mktemp)
  cat >"$conf" <<EOF
$TAG
ClusterName=reconciler-dev
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$SPOOL_CTLD
SlurmdSpoolDir=$SPOOL_D
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
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
$gres_types
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$mem $gres_node State=UNKNOWN
PartitionName=$PART Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  { echo "$TAG"; echo "AutoDetect=off"
    [ "$GPUS" -gt 0 ] && echo "NodeName=$HOST Name=gpu File=$GPU_DIR/gpu[0-$((GPUS - 1))]"; } >"$gres"
  local pair src dst
  for pair in "$conf:$ETC/slurm.conf" "$gres:$ETC/gres.conf"; do
    src=${pair%%:*}; dst=${pair#*:}
    if ! cmp -s "$src" "$dst"; then
      [ -e "$dst" ] && ! grep -q "^$TAG" "$dst" && cp -p "$dst" "$dst.before-slurm-dev"
      install -m 0644 "$src" "$dst"; CHANGED=1
    fi
    rm -f "$src"
  done
}

stop_recorded() { # NAME DAEMON_PIDFILE
  local name=$1 dpf=$2 pid
  pid=$(pid_of "$REC_DIR/$name.pid" "$name" || true)
  rm -f "$REC_DIR/$name.pid"
  [ -n "$pid" ] || return 0
  say "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  local end=$((SECONDS + 30))
  while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.2; done
  kill -0 "$pid" 2>/dev/null && { say "$name still alive, SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; sleep 0.3; }
  [ "$(tr -dc 0-9 2>/dev/null <"$dpf")" = "$pid" ] && rm -f "$dpf"
  return 0
}

node_usable() {
  [ -n "$(pid_of $SLURMD_PID slurmd)" ] || return 2
  if [ -n "${SLURMD_STARTED:-}" ]; then   # the slurmd we just started must have registered
    local ts; ts=$(scontrol show node "$HOST" 2>/dev/null | sed -n 's/.*SlurmdStartTime=\([^ ]*\).*/\1/p')
    case $ts in ''|None) return 1 ;; esac
    [ "$(date -d "$ts" +%s)" -ge "$SLURMD_STARTED" ] || return 1
  fi
  local st; st=$(sinfo -h -N -n "$HOST" -o '%T' 2>/dev/null | head -1)
  case $st in
    idle|mixed|allocated|completing) return 0 ;;
    drain*|down*|fail*|inval*)
      if [ $((SECONDS - ${LAST_RESUME:--10})) -ge 2 ]; then
        LAST_RESUME=$SECONDS; scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 || true
      fi
      return 1 ;;
    *) return 1 ;;
  esac
}

up() {
  [ "$(id -u)" = 0 ] || die "run as root"
  install_packages
  write_config
  if [ "$CHANGED" = 1 ]; then
    say "configuration written to $ETC"
    stop_recorded slurmd $SLURMD_PID; stop_recorded slurmctld $CTLD_PID
  fi
  local t0; t0=$(date +%s.%N)

  if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    say "munged already running"
  else
    [ -z "$(pid_of $MUNGE_PID munged || true)" ] && rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
    say "starting munged"
    launch "$LOGS/munged.out" runuser -u munge -- /usr/sbin/munged --num-threads=10
    poll sh -c 'munge -n </dev/null | unmunge' || die "munge does not work (see /var/log/munge/munged.log)"
    echo "$(pid_of $MUNGE_PID munged)" >"$REC_DIR/munged.pid"
  fi

  if [ -n "$(pid_of $CTLD_PID slurmctld || true)" ]; then
    say "slurmctld already running"
    [ "$CHANGED" = 1 ] && scontrol reconfigure >/dev/null 2>&1 || true
  else
    say "starting slurmctld${SLURM_FRESH:+ (fresh state)}"
    rm -f $CTLD_PID
    if [ "${SLURM_FRESH:-0}" = 1 ]; then
      launch "$LOGS/slurmctld.out" /usr/sbin/slurmctld -i -c
    else
      launch "$LOGS/slurmctld.out" /usr/sbin/slurmctld -i
    fi
    poll pid_of $CTLD_PID slurmctld || { tail -20 "$LOGS/slurmctld.log" >&2; die "slurmctld did not start"; }
    pid_of $CTLD_PID slurmctld >"$REC_DIR/slurmctld.pid"
  fi
  poll sh -c 'scontrol ping | grep -q "is UP"' || { tail -20 "$LOGS/slurmctld.log" >&2; die "slurmctld does not answer"; }

  if [ -n "$(pid_of $SLURMD_PID slurmd || true)" ]; then
    say "slurmd already running"
  else
    say "starting slurmd"
    rm -f $SLURMD_PID
    SLURMD_STARTED=$(date +%s)
    launch "$LOGS/slurmd.out" /usr/sbin/slurmd -N "$HOST"
    poll pid_of $SLURMD_PID slurmd || { tail -20 "$LOGS/slurmd.log" >&2; die "slurmd did not start"; }
    pid_of $SLURMD_PID slurmd >"$REC_DIR/slurmd.pid"
  fi
  if ! poll node_usable; then
    sinfo -N -l >&2 || true; tail -10 "$LOGS/slurmd.log" >&2 || true
    die "node $HOST not usable after ${TIMEOUT}s"
  fi
  say "up in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s: node $HOST, $CPUS CPUs, $GPUS fake GPUs, partition $PART"
}

down() {
  if [ -n "$(pid_of "$REC_DIR/slurmctld.pid" slurmctld || true)" ] && scontrol ping 2>/dev/null | grep -q 'is UP'; then
    local jobs; jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
    if [ -n "${jobs// /}" ]; then
      say "cancelling jobs: $jobs"
      # shellcheck disable=SC2086
      scancel $jobs 2>/dev/null || true
      local end=$((SECONDS + 30))
      while [ -n "$(squeue -h -o %i 2>/dev/null)" ] && [ $SECONDS -lt $end ]; do sleep 0.3; done
    fi
  fi
  stop_recorded slurmd $SLURMD_PID
  stop_recorded slurmctld $CTLD_PID
  stop_recorded munged $MUNGE_PID
  rmdir "$REC_DIR" 2>/dev/null || true
  say "down"
}

status() {
  local n rc=0
  for n in munged slurmctld slurmd; do
    case $n in munged) f=$MUNGE_PID ;; slurmctld) f=$CTLD_PID ;; slurmd) f=$SLURMD_PID ;; esac
    if p=$(pid_of $f $n); then
      own=""; [ "$(tr -dc 0-9 2>/dev/null <"$REC_DIR/$n.pid")" = "$p" ] && own=" (started by slurm-dev.sh)"
      echo "$n: running, pid $p$own"
    else
      echo "$n: not running"; rc=1
    fi
  done
  [ $rc = 0 ] && sinfo -N -o '%N %T %C %G' 2>/dev/null
  return $rc
}

case $CMD in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
