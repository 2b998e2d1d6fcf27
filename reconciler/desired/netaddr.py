"""Node addresses on the configured NIC, learnt by each node at launch (srtctl's ``network_interface``).

srtctl resolves a node's IP before it launches anything (``srun`` on the node: the first
IPv4 address of ``network_interface``) and passes IPs where a process is told where to
connect: ``--master-addr``, ``--data-parallel-address``, ``--dist-init-addr``,
``HEAD_NODE_IP``, ``MASTER_ADDR``, the NIXL side channel host, the Mooncake addresses. The
reconciler plans without running anything on the nodes, so with ``reconcile.network_interface``
set (the cluster config's ``network_interface``) those positions carry a placeholder
``@rcl-ip:<host>@`` and the step starts through a fixed bash script (``SCRIPT``) that

1. reads the IPv4 address of the first listed interface that has one on its own node and
   publishes it as ``<dir>/<host>`` (``dir`` is in the recipe's config directory, which every
   node and container sees at the same path);
2. waits (up to ``WAIT_S``, or ``$RCL_ADDR_WAIT_S`` in the step's environment) for the files of the other hosts its placeholders name (their own
   steps publish them; a restarted follower reads the file its leader left);
3. substitutes the placeholders in its argv and in the listed environment variables, and
   ``exec``s the argv.

Recipe text reaches the script only as positional arguments, never as script text. A node
without an address on the interface, or a peer that never publishes, falls back to the
hostname with a line on stderr. Without a configured interface nothing changes: addresses
are hostnames (srtctl would still resolve the default route's IP; see docs/recipes.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

TAG = "node-addr"  # $0 of the wrapper: how a reader (and the tests) recognise it
WAIT_S = 600
# argv flags whose value is an address (or address:port) a process connects to
# (``--host``: only when its value is a node's name, TokenSpeed's bind address; 0.0.0.0 is left alone)
ADDRESS_FLAGS = frozenset({"--master-addr", "--data-parallel-address", "--dist-init-addr", "--host"})
# environment variables whose value is (or holds) such an address
ADDRESS_ENV = frozenset({
    "HEAD_NODE_IP", "MASTER_ADDR", "VLLM_NIXL_SIDE_CHANNEL_HOST", "ATOM_HOST_IP", "MOONCAKE_MASTER",
    "MOONCAKE_TE_META_DATA_SERVER", "MOONCAKE_LOCAL_HOSTNAME",
})

# Positional arguments: $1 interfaces (comma list), $2 address directory, $3 this node's name
# (empty: Slurm's SLURMD_NODENAME, for a step spanning nodes), $4 hosts to learn (comma list),
# $5 environment variables to rewrite (comma list), then the argv.
SCRIPT = f"wait_s=${{RCL_ADDR_WAIT_S:-{WAIT_S}}}\n" + r"""ifaces=$1 dir=$2 me=${3:-${SLURMD_NODENAME:-$(hostname -s)}} hosts=$4 vars=$5; shift 5
ip=
IFS=, read -ra cands <<<"$ifaces"
for i in "${cands[@]}"; do
  ip=$(ip -o -4 addr show dev "$i" 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}')
  [ -n "$ip" ] && break
done
if [ -z "$ip" ]; then
  echo "node-addr: no IPv4 address on $ifaces on $me; passing the hostname" >&2
  ip=$me
fi
mkdir -p -- "$dir" && printf '%s\n' "$ip" >"$dir/.$me.$$" && mv -f -- "$dir/.$me.$$" "$dir/$me"
declare -A addr
IFS=, read -ra want <<<"$hosts"
for h in "${want[@]}"; do
  if [ "$h" = "$me" ]; then addr[$h]=$ip; continue; fi
  for ((n = 0; n < wait_s; n++)); do [ -s "$dir/$h" ] && break; sleep 1; done
  a=$(head -n1 -- "$dir/$h" 2>/dev/null)
  [ -n "$a" ] || echo "node-addr: $h published no address in ${wait_s}s; passing the hostname" >&2
  addr[$h]=${a:-$h}
done
args=("$@")
for k in "${!args[@]}"; do
  for h in "${!addr[@]}"; do args[k]=${args[k]//"@rcl-ip:$h@"/"${addr[$h]}"}; done
done
IFS=, read -ra names <<<"$vars"
for v in "${names[@]}"; do
  val=${!v-}
  for h in "${!addr[@]}"; do val=${val//"@rcl-ip:$h@"/"${addr[$h]}"}; done
  export "$v=$val"
done
exec "${args[@]}"
"""


def token(host: str) -> str:
    return f"@rcl-ip:{host}@"


def _swap(value: str, hosts: Iterable[str], used: set[str]) -> str:
    """``value`` with each host in an address position (whole, ``host:port``, ``scheme://host[:/]``) tokenised."""
    for h in sorted(hosts, key=len, reverse=True):  # node10 before node1
        if value == h or value.startswith(h + ":"):
            value = token(h) + value[len(h):]
            used.add(h)
        for sep in (":", "/"):
            if f"://{h}{sep}" in value:
                value = value.replace(f"://{h}{sep}", f"://{token(h)}{sep}")
                used.add(h)
        if value.endswith(f"://{h}"):
            value = value[: -len(h)] + token(h)
            used.add(h)
    return value


def resolve_at_launch(argv: list[str], env: Mapping[str, str], hosts: Iterable[str], iface: str,
                      addr_dir: str, node: str | None) -> tuple[list[str], dict[str, str]]:
    """(argv behind the wrapper, env with placeholders) when an address position names one of
    ``hosts``; otherwise both unchanged. ``node``: the launch's node (None: a step over several)."""
    hosts = list(hosts)
    used: set[str] = set()
    out = list(argv)
    for i in range(len(out) - 1):
        if out[i] in ADDRESS_FLAGS:
            out[i + 1] = _swap(out[i + 1], hosts, used)
    new_env = dict(env)
    names = []
    for k in sorted(ADDRESS_ENV & set(env)):
        v = _swap(env[k], hosts, used)
        if v != env[k]:
            new_env[k] = v
            names.append(k)
    if not used:
        return list(argv), dict(env)
    order = [h for h in hosts if h in used]
    wrapper = ["bash", "-c", SCRIPT, TAG, iface, addr_dir, node or "", ",".join(order), ",".join(names)]
    return wrapper + out, new_env


def strip(argv: list[str]) -> list[str]:
    """The argv behind the wrapper (unchanged when there is none)."""
    if len(argv) > 8 and argv[:2] == ["bash", "-c"] and argv[3] == TAG:
        return argv[9:]
    return argv
