#!/usr/bin/env bash
# slurm-multinode.sh up [--nodes K]|down|status — a real K-node Slurm on ONE machine, for tests.
#
# Beside the single-node Slurm of scripts/slurm-dev.sh (which it never touches): a second
# slurmctld with its own config, ports and state under $MN_DIR, and K slurmd, each in its own
# network + UTS namespace with its own hostname (rnode1..K) and address (10.213.0.11..), so srun
# steps, per-node ports and HTTP between nodes behave as on a real cluster. Clients reach it with
#
#   export SLURM_CONF=$MN_DIR/slurm.conf       # (default /tmp/slurm-mn/slurm.conf)
#
# Idempotent: `up` with the cluster already up (same config) does nothing; a changed config (another
# K) restarts only this cluster's daemons; a dead slurmd is started again. `down` removes only what `up` made: the daemons by recorded pid (checked
# against /proc comm), the namespaces slurmmn-N, the bridge, the tagged /etc/hosts lines, $MN_DIR.
# Needs root, slurm-wlm and a running munged (scripts/slurm-dev.sh up provides both).
#
# Environment knobs:
#   MN_DIR          where config, state, logs and pid records live (default /tmp/slurm-mn)
#   MN_GPUS         fake GPUs per node (default 4)      MN_CPUS  CPUs per node (default 16)
#   MN_SLURMD_TIMEOUT  seconds before slurmctld marks a silent slurmd DOWN (default 10: tests
#                   kill a slurmd and must see the node fail within seconds, not minutes)
# ReturnToService=1, as on most clusters: a node DOWN for not responding returns when its slurmd
# registers again; one an admin set DOWN stays down (with its reason) until `state=resume`.
#   SLURM_TIMEOUT   seconds to wait for the nodes (default 60)
#
# Facts this relies on (each one cost an afternoon):
# - `ip netns exec` remounts /sys for the namespace, which hides /sys/fs/cgroup, and slurmd dies
#   with "No filesystem mounted on /sys/fs/cgroup": enter the namespace with `nsenter --net=`.
# - slurmd takes its node name from the hostname: `unshare --uts` + `hostname rnodeN` per node;
#   the names resolve through /etc/hosts lines this script adds (tagged) and removes.
# - SlurmdSpoolDir / SlurmdPidFile / SlurmdLogFile take %n, so K slurmd share one slurm.conf;
#   gres.conf is read from the directory of slurm.conf, one line per node.
# - The mount namespace is shared: munged's socket, the test's state directories and the
#   project's venv are the same paths on every node ("a filesystem all nodes see").
# - Addresses 10.213.0.0/24 on a bridge in the root namespace (controller .1, nodes .11…): this
#   machine's own test hosts; traffic to them never leaves the machine.
# - SlurmctldHost must be this machine's short hostname; its address here is the bridge's, so
#   the nodes reach the controller and an srun in the root namespace is reachable from them.
# - Daemons must not inherit our stdout/stderr pipes (a CI step waiting on the pipe never ends).
set -euo pipefail

CMD=${1:-up}; shift || true
K=3
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) K=${2:?--nodes needs a number}; shift 2 ;;
    --nodes=*) K=${1#--nodes=}; shift ;;
    *) echo "usage: $0 up [--nodes K] | down | status" >&2; exit 2 ;;
  esac
done
case $K in ''|*[!0-9]*) echo "--nodes: expected a number 1..9, got '$K'" >&2; exit 2 ;; esac
[ "$K" -ge 1 ] && [ "$K" -le 9 ] || { echo "--nodes: expected 1..9, got $K" >&2; exit 2; }

D=${MN_DIR:-/tmp/slurm-mn}
GPUS=${MN_GPUS:-4}
CPUS=${MN_CPUS:-16}
SLURMD_TIMEOUT=${MN_SLURMD_TIMEOUT:-10}
TIMEOUT=${SLURM_TIMEOUT:-60}
NET=10.213.0; BR=br-slurmmn; CTL=$(hostname -s)
HOSTS_TAG="# slurm-multinode (reconciler)"
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

say() { echo "[slurm-multinode $(date +%T)] $*"; }
die() { echo "[slurm-multinode $(date +%T)] ERROR: $*" >&2; exit 1; }

rec_pid() { # RECORD COMM -> pid when the recorded process is alive with that comm
  local p; p=$(tr -dc 0-9 2>/dev/null <"$D/run/$1.rec" || true)
  [ -n "$p" ] && [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "$2" ] && echo "$p"
}

launch() { # RECORD LOG CMD... ; detached, no inherited fds beyond 0-2, pid recorded
  local rec=$1 logf=$2; shift 2
  (
    for fd in /proc/$BASHPID/fd/*; do
      fd=${fd##*/}
      case $fd in 0|1|2) ;; *) eval "exec $fd>&-" 2>/dev/null || true ;; esac
    done
    exec "$@" </dev/null >>"$logf" 2>&1
  ) &
  echo $! >"$D/run/$rec.rec"
}

sctl() { SLURM_CONF=$D/slurm.conf "$@"; }

all_idle() { # every node answers and takes jobs
  local n; n=$(sctl sinfo -h -N -o '%N %T' 2>/dev/null | awk '$2 ~ /^(idle|mixed|allocated)$/' | wc -l)
  [ "$n" = "$K" ]
}

stop_pid() { # PID NAME
  kill -TERM "$1" 2>/dev/null || true
  local end=$((SECONDS + 20))
  while kill -0 "$1" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.2; done
  kill -0 "$1" 2>/dev/null && { say "$2 still alive, SIGKILL"; kill -KILL "$1" 2>/dev/null || true; }
  return 0
}

stop_daemons() { # every recorded daemon at once (slurmd first in the list), then wait for each
  local f name p pids=()
  for f in "$D"/run/slurmd*.rec "$D"/run/ctld.rec; do
    [ -f "$f" ] || continue
    name=$(basename "$f" .rec)
    case $name in ctld) comm=slurmctld ;; *) comm=slurmd ;; esac
    # nsenter/unshare exec into slurmd, so the recorded pid is the daemon itself
    if p=$(rec_pid "$name" "$comm"); then say "stopping $name (pid $p)"; kill -TERM "$p" 2>/dev/null || true; pids+=("$p:$name"); fi
    rm -f "$f"
  done
  for p in "${pids[@]}"; do stop_pid "${p%%:*}" "${p#*:}"; done
}

down() {
  [ "$(id -u)" = 0 ] || die "run as root"
  if [ -f "$D/slurm.conf" ] && [ -n "$(rec_pid ctld slurmctld || true)" ]; then
    # this cluster's jobs only: SLURM_CONF points every client at our slurmctld
    local jobs; jobs=$(sctl squeue -h -o %i 2>/dev/null | tr '\n' ' ' || true)
    [ -n "${jobs// /}" ] && { say "cancelling jobs: $jobs"; sctl scancel $jobs 2>/dev/null || true; }
  fi
  stop_daemons
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '/^slurmmn-[0-9]+/ {print $1}'); do
    ip netns del "$ns" && say "removed namespace $ns"   # takes its veth pair along
  done
  ip link del "$BR" 2>/dev/null && say "removed bridge $BR" || true
  if grep -q " $HOSTS_TAG\$" /etc/hosts; then
    # /etc/hosts may be a bind mount: rewrite it in place, never replace the file
    local keep; keep=$(grep -v " $HOSTS_TAG\$" /etc/hosts || true)
    printf '%s\n' "$keep" >/etc/hosts; say "removed /etc/hosts lines"
  fi
  [ -f "$D/made-by-slurm-multinode" ] && rm -rf "$D"
  say "down"
}

write_config() {
  local nodes="" i g
  : >"$D/gres.conf.new"
  for i in $(seq 1 "$K"); do
    mkdir -p "$D/gpu/rnode$i" "$D/spool/rnode$i"
    for ((g = 0; g < GPUS; g++)); do ln -sfn /dev/null "$D/gpu/rnode$i/gpu$g"; done
    [ "$GPUS" -gt 0 ] && echo "NodeName=rnode$i Name=gpu File=$D/gpu/rnode$i/gpu[0-$((GPUS - 1))]" >>"$D/gres.conf.new"
    nodes+="NodeName=rnode$i NodeAddr=$NET.1$i CPUs=$CPUS RealMemory=4000${GPUS:+ Gres=gpu:$GPUS} State=UNKNOWN"$'\n'
  done
  [ "$GPUS" -gt 0 ] || nodes=${nodes// Gres=gpu:0/}
  cat >"$D/slurm.conf.new" <<EOF
# written by reconciler scripts/slurm-multinode.sh (K=$K)
ClusterName=mn
SlurmctldHost=$CTL($NET.1)
SlurmUser=slurm
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=6917
SlurmdPort=6818
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
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
SlurmdTimeout=$SLURMD_TIMEOUT
ReturnToService=1
MinJobAge=60
KillWait=5
GresTypes=gpu
${nodes}PartitionName=debug Nodes=rnode[1-$K] Default=YES MaxTime=INFINITE State=UP
EOF
  CHANGED=0
  cmp -s "$D/slurm.conf.new" "$D/slurm.conf" && cmp -s "$D/gres.conf.new" "$D/gres.conf" || CHANGED=1
  mv "$D/gres.conf.new" "$D/gres.conf"; mv "$D/slurm.conf.new" "$D/slurm.conf"
}

net_up() {
  local i ns
  ip link show "$BR" >/dev/null 2>&1 || ip link add "$BR" type bridge
  # (no `ip | grep -q` under pipefail: grep quitting early fails the pipeline with SIGPIPE)
  case $(ip -4 addr show dev "$BR") in *"inet $NET.1/"*) ;; *) ip addr add "$NET.1/24" dev "$BR" ;; esac
  ip link set "$BR" up
  for i in $(seq 1 "$K"); do
    ns=slurmmn-$i
    [ -e "/run/netns/$ns" ] || ip netns add "$ns"
    if ! nsenter --net=/run/netns/"$ns" ip link show "smn${i}p" >/dev/null 2>&1; then
      ip link del "smn$i" 2>/dev/null || true
      ip link add "smn$i" type veth peer name "smn${i}p"
      ip link set "smn${i}p" netns "$ns"
    fi
    ip link set "smn$i" master "$BR"; ip link set "smn$i" up
    nsenter --net=/run/netns/"$ns" sh -c "ip addr show dev smn${i}p | grep -q 'inet $NET.1$i/' || ip addr add $NET.1$i/24 dev smn${i}p
      ip link set smn${i}p up; ip link set lo up"
    grep -q "^$NET.1$i rnode$i $HOSTS_TAG\$" /etc/hosts || echo "$NET.1$i rnode$i $HOSTS_TAG" >>/etc/hosts
  done
}

up() {
  [ "$(id -u)" = 0 ] || die "run as root"
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null ||
    die "slurm-wlm is not installed (scripts/slurm-dev.sh up installs it)"
  munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 ||
    die "munged must run (scripts/slurm-dev.sh up starts it)"
  if ! command -v ip >/dev/null || ! command -v nsenter >/dev/null; then  # a minimal image may lack them
    say "installing iproute2 and util-linux (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends iproute2 util-linux \
      >/tmp/slurm-multinode-apt.log 2>&1 || die "apt-get failed; log in /tmp/slurm-multinode-apt.log"
  fi
  local t0; t0=$(date +%s.%N)
  mkdir -p "$D"/spool "$D"/run "$D"/log "$D"/state
  touch "$D/made-by-slurm-multinode"
  chown slurm:slurm "$D"/state "$D"/log
  net_up
  write_config
  if [ "$CHANGED" = 1 ] && [ -n "$(rec_pid ctld slurmctld || true)" ]; then
    say "configuration changed: restarting this cluster's daemons"; stop_daemons
  fi
  if [ -n "$(rec_pid ctld slurmctld || true)" ] && all_idle; then
    say "already up: $K nodes"; sctl sinfo -N -o '%N %T %C %G'; return 0
  fi
  if [ -z "$(rec_pid ctld slurmctld || true)" ]; then
    say "starting slurmctld (port 6917, fresh state)"
    # -c: forget jobs of an earlier run (their nodes and namespaces may be gone)
    launch ctld "$D/log/slurmctld.out" slurmctld -f "$D/slurm.conf" -c -D -i
    local end=$((SECONDS + TIMEOUT))
    until sctl scontrol ping 2>/dev/null | grep -q "is UP"; do
      [ -n "$(rec_pid ctld slurmctld || true)" ] || { tail -20 "$D/log/slurmctld.log" >&2; die "slurmctld exited"; }
      [ $SECONDS -lt $end ] || die "slurmctld does not answer"; sleep 0.2
    done
  fi
  local i
  for i in $(seq 1 "$K"); do
    [ -n "$(rec_pid "slurmd$i" slurmd || true)" ] && continue
    say "starting slurmd on rnode$i ($NET.1$i)"
    rm -f "$D/run/slurmd-rnode$i.pid"
    launch "slurmd$i" "$D/log/slurmd$i.out" nsenter --net=/run/netns/slurmmn-$i unshare --uts \
      sh -c "hostname rnode$i && exec slurmd -f '$D/slurm.conf' -D"
  done
  local end=$((SECONDS + TIMEOUT)) last=0
  until all_idle; do
    [ $SECONDS -lt $end ] || { sctl sinfo -N -l >&2 || true; die "nodes not usable after ${TIMEOUT}s"; }
    if [ $((SECONDS - last)) -ge 2 ]; then  # a node left DOWN by an earlier run: bring it back
      last=$SECONDS
      for n in $(sctl sinfo -h -N -o '%N %T' 2>/dev/null | awk '$2 ~ /^(down|drain|fail)/ {print $1}'); do
        sctl scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true
      done
    fi
    sleep 0.2
  done
  say "up in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s: $K nodes, $CPUS CPUs and $GPUS fake GPUs each; export SLURM_CONF=$D/slurm.conf"
  sctl sinfo -N -o '%N %T %C %G'
}

status() {
  local rc=0 i
  if p=$(rec_pid ctld slurmctld); then echo "slurmctld: running, pid $p"; else echo "slurmctld: not running"; rc=1; fi
  for f in "$D"/run/slurmd*.rec; do
    [ -f "$f" ] || continue; i=$(basename "$f" .rec)
    if p=$(rec_pid "$i" slurmd); then echo "$i: running, pid $p"; else echo "$i: not running"; rc=1; fi
  done
  [ $rc = 0 ] && sctl sinfo -N -o '%N %T %C %G' 2>/dev/null
  return $rc
}

case $CMD in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up [--nodes K] | down | status" >&2; exit 2 ;;
esac
