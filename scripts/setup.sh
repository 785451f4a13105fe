#!/usr/bin/env bash
# THE install script of multicluster-testbed: system packages, a virtualenv in .venv and the
# project with its dev extras. Idempotent and quick when nothing changed. Used by `make demo`,
# `make test`, .ci/run and the Vagrantfile's provisioner. Debian 12 / Ubuntu 24.04.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# iproute2: ip/tc; iptables: the delay line's NFQUEUE rules; tcpdump: pcap traces;
# qemu-system-x86, kmod, zstd: `testbed vm` (a stock kernel with netem/fq/red/dctcp in a QEMU
# guest; zstd unpacks Ubuntu's .ko.zst modules; docs/vm.md). Only the tests and benchmarks use
# iputils-ping (RTT checks) and iperf3 (bulk TCP benchmarks). mininet (for its mnexec; its
# Python module comes from PyPI into .venv), net-tools (ifconfig) and bridge-utils (brctl):
# `engine: mininet` and `testbed.mininet` (docs/mininet.md). fping and irtt: flent's and irtt's
# checks of the emulated links (tests/acceptance; flent itself comes from PyPI). frr (zebra,
# bgpd, bfdd): `routing: {mode: bgp}` runs its own instances in the gateway namespaces
# (docs/multipath.md); its package's system service is not started by this script. stress-ng:
# `make test-stress`'s background load beside the timing tests (scripts/test_stress.py).
# chromium: the suite loads `testbed report`'s HTML in a headless browser (console errors,
# images) and keeps a screenshot (tests/live/test_report_browser.py).
PACKAGES=(iproute2 iptables tcpdump qemu-system-x86 kmod zstd python3 python3-venv
          iputils-ping iperf3 mininet net-tools bridge-utils fping irtt frr stress-ng chromium)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
# A python3 outside dpkg (pyenv, a distribution build) is fine if it can make venvs.
if command -v python3 >/dev/null && python3 -c 'import venv, ensurepip' 2>/dev/null; then
  keep=()
  for p in "${missing[@]}"; do
    case "$p" in python3|python3-venv) ;; *) keep+=("$p") ;; esac
  done
  missing=("${keep[@]}")
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing system packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq || echo "setup: apt-get update failed; trying with the current lists"
  # A policy-rc.d that refuses every service start while the packages install (frr's would
  # run daemons in the machine's own namespace); only one this script made is removed again.
  policy=/usr/sbin/policy-rc.d
  made_policy=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    made_policy=1
  fi
  status=0
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || status=$?
  if [ -n "$made_policy" ]; then $SUDO rm -f "$policy"; fi
  if [ "$status" -ne 0 ]; then exit "$status"; fi
fi

PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "setup: Python >= 3.11 is needed, $("$PY" --version) found" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
# Reinstall only when the project's dependencies changed.
stamp=.venv/.setup-stamp
want=$(sha256sum pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing the project into .venv"
  log=.venv/setup-pip.log
  # torch first, pinned: an unpinned torch from PyPI is a multi-GB CUDA build. PyTorch's CPU
  # index is used when this machine can reach it; otherwise pip's own configuration decides.
  torch_index=()
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    torch_index=(--index-url "$TORCH_INDEX_URL")
  elif command -v curl >/dev/null && curl -fsS --max-time 3 -o /dev/null https://download.pytorch.org/whl/cpu/ 2>/dev/null; then
    torch_index=(--index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple)
  fi
  if ! { .venv/bin/python -m pip install -q --upgrade pip &&
         .venv/bin/python -m pip install -q "${torch_index[@]}" torch==2.13.0 &&
         .venv/bin/python -m pip install -q -e '.[ranks,dev,mininet,ray,examples]'; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "setup: pip install failed (log above, also in $log)" >&2
    exit 1
  fi
  echo "$want" > "$stamp"
fi
echo "setup: ready ($(.venv/bin/python --version), $(.venv/bin/testbed --help >/dev/null && echo testbed ok))"
