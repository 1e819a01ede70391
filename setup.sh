#!/usr/bin/env bash
# Install everything the exporter, the demo and the tests need on a fresh Debian
# machine, as root or with sudo. Safe to run again: it installs only what is
# missing, so a second run takes about a second.
#
# Python packages go into ./.venv, made with whichever python3 comes first on
# PATH: Debian's own python3 refuses a system-wide pip install (PEP 668).
#
# --real-engines also installs the real-engine test tier's engines, vLLM for the CPU,
# llama.cpp's llama-server and SGLang for the CPU, under ~/.cache/rig-telemetry
# (docs/testing.md): the first time about 15 minutes and 6.4 GB, then about a second.
set -euo pipefail
cd "$(dirname "$0")"

real_engines=false
for arg in "$@"; do
    case "$arg" in
        --real-engines) real_engines=true ;;
        *) echo "usage: $0 [--real-engines]" >&2; exit 2 ;;
    esac
done

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# promtool and amtool test the alert rules and routing; prometheus and
# alertmanager run the end-to-end tests and the demo; node_exporter is the
# bench's latency yardstick; victoria-metrics is the remote_write store of the
# many-rigs test; nginx is the stream tap's yardstick (bench/bench_tap.py --nginx);
# chromium opens `rigctl report --html`'s page headless (tests/rigctl/report).
declare -A deb_for_cmd=(
    [prometheus]=prometheus [promtool]=prometheus
    [prometheus-alertmanager]=prometheus-alertmanager [amtool]=prometheus-alertmanager
    [prometheus-node-exporter]=prometheus-node-exporter
    [victoria-metrics]=victoria-metrics
    [nginx]=nginx-light
    [chromium]=chromium
)
missing=()
for cmd in "${!deb_for_cmd[@]}"; do
    # nginx lives in /usr/sbin, which a user's PATH may not hold.
    command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || missing+=("${deb_for_cmd[$cmd]}")
done
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: $(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -qq
    # shellcheck disable=SC2046
    as_root apt-get install -y -qq --no-install-recommends $(printf '%s\n' "${missing[@]}" | sort -u) >/dev/null
    # Debian starts the packaged daemons; the project runs its own on loopback.
    for unit in prometheus prometheus-alertmanager prometheus-node-exporter victoria-metrics nginx; do
        as_root systemctl disable --now "$unit" >/dev/null 2>&1 || true
    done
fi

if [ ! -x .venv/bin/python ]; then
    echo "setup: making .venv with $(command -v python3) ($(python3 --version))"
    python3 -m venv .venv
fi
# Reinstall only when the package's declaration changed since the last install.
stamp=.venv/.rig-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "setup: installing rig-telemetry and its test, fast and html extras into .venv"
    .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,fast,html]'
    touch "$stamp"
fi

if [ "$real_engines" = true ]; then
    tests/real_engines/install.sh
fi
