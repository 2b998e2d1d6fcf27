#!/usr/bin/env bash
# Installs what the status page's browser test drives: Debian's Chromium and its chromedriver
# (tests/test_ui_browser.py runs them headless through selenium, a dev dependency in pyproject).
# Idempotent: nothing is installed when both are on PATH. Called by .ci/run.
set -euo pipefail
say() { printf '[browser-install %s] %s\n' "$(date +%T)" "$*"; }
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  say "ready: $(chromium --version 2>/dev/null | head -1), $(chromedriver --version | head -1)"
  exit 0
fi
say "installing chromium and chromium-driver (apt-get)"
rc=0
{ apt-get update -q >/tmp/browser-apt.log 2>&1 &&
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium chromium-driver \
    >>/tmp/browser-apt.log 2>&1; } || rc=$?
[ $rc = 0 ] || { tail -20 /tmp/browser-apt.log >&2; say "error: apt-get failed ($rc); log in /tmp/browser-apt.log" >&2; exit 1; }
say "ready: $(chromedriver --version | head -1)"
