#!/usr/bin/env bash
# Installs the Debian packages spatialgrad needs (when run as root), then makes the venv. The names are
# those of Debian 12 (bookworm) and Debian 13 (trixie) alike: `clang` and `libclang-rt-dev` are each release's
# default clang (14 on Debian 12, 19 on Debian 13) and its sanitizer/libFuzzer runtime.
# Usage: scripts/bootstrap.sh VENV_DIR [extra Debian packages...]
set -euo pipefail
venv=${1:?usage: scripts/bootstrap.sh VENV_DIR [packages...]}
shift || true

packages=(
  build-essential cmake pkg-config
  python3 python3-dev python3-venv python3-pip python3-setuptools python3-wheel
  python3-numpy python3-pytest pybind11-dev
  libgtest-dev libbenchmark-dev
  clang libclang-rt-dev clang-tidy
  python3-hypothesis
  python3-torch python3-torchvision python3-matplotlib
  # libtorch's headers and CMake package: the native PyTorch operators (libspatialgrad_torch) build against them
  libtorch-dev
  # PyTorch's BLAS: without it (--no-install-recommends) Debian's reference libblas3 serves its GEMMs,
  # 10-30x slower (nn.Linear(256, 1024) fwd+bwd on 10880 tokens: 2.96 s, 0.11 s with OpenBLAS)
  libopenblas0-pthread
  python3-nbclient python3-nbformat python3-ipykernel
  "$@"
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "bootstrap: missing Debian packages: ${missing[*]}" >&2
    echo "bootstrap: run as root, or: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "bootstrap: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The python3 on PATH may be a build without NumPy: always use Debian's interpreter.
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
