#!/usr/bin/env bash
# Installs the Debian packages qlens builds and tests with, when missing, and
# the Python packages the reference tests use (PyPI's gguf and numpy: optional,
# tests that need them skip when they are absent), and Debian's chromium for
# the report's browser test (optional too: that test skips without it).
set -euo pipefail

# Vulkan: headers and loader, the shader compiler, and Mesa's lavapipe (a CPU
# implementation of Vulkan) so the Vulkan backend's tests run without a GPU.
# clang and its runtime libraries (libFuzzer, the sanitizers): the fuzz
# targets (make fuzz, scripts/fuzz.sh). strace: the crash-safety test checks
# the order of fsync and rename with it. Open MPI: runs across processes and
# machines (mpirun; the build turns MPI on when it finds it: docs/CLUSTER.md).
packages=(cmake g++ make libgtest-dev libbenchmark-dev python3 python3-pip
          libvulkan-dev glslc mesa-vulkan-drivers clang libclang-rt-14-dev strace
          openmpi-bin libopenmpi-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
updated=0
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  updated=1
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# Headless Chromium renders `qlens report`'s page in ctest's
# ReportBrowser.* test (no console errors, every chart drawn).
if ! command -v chromium >/dev/null 2>&1; then
  echo "installing (optional, for the report's browser test): chromium"
  { [ "$updated" = 1 ] || $SUDO apt-get update -qq; } &&
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium ||
    echo "note: could not install chromium; the report's browser test will skip"
fi

if ! python3 -c 'import gguf, numpy, pandas' >/dev/null 2>&1; then
  echo "installing Python reference packages: gguf numpy pandas"
  python3 -m pip install -q gguf numpy pandas 2>/dev/null ||
    python3 -m pip install -q --break-system-packages gguf numpy pandas 2>/dev/null ||
    echo "note: could not install gguf/numpy/pandas; the Python reference tests will skip"
fi
