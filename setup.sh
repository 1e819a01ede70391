#!/usr/bin/env bash
# Install everything the exporter, the demo and the tests need on a fresh Debian
# machine. Run as root (CI does) or with sudo. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")"

# promtool and amtool test the alert rules and routing; node_exporter is the
# bench's latency yardstick.
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    prometheus prometheus-alertmanager prometheus-node-exporter >/dev/null

python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore -e '.[test]'
