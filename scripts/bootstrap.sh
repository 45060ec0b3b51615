#!/usr/bin/env bash
# Installs the Debian packages spatialgrad needs (when run as root), then makes the venv. The names are
# those of Debian 12 (bookworm) and Debian 13 (trixie) alike: `clang` and `libclang-rt-dev` are each release's
# default clang (14 on Debian 12, 19 on Debian 13) and its sanitizer/libFuzzer runtime. The optional packages are
# installed where the release has them (`apt-cache show` finds them) and skipped quietly where it does not.
# Usage: scripts/bootstrap.sh VENV_DIR [extra Debian packages...]
set -euo pipefail
venv=${1:?usage: scripts/bootstrap.sh VENV_DIR [packages...]}
shift || true

packages=(
  build-essential cmake pkg-config
  # tests/python/test_design_map.py lists the tracked files with git ls-files (a Debian 13 root has no git)
  git
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
  # ONNX export (spatialgrad.torch registers its symbolic functions; tests check the graphs with onnx.checker)
  python3-onnx
  # mypy: tests/python/test_types.py checks the stub of the binding (stubtest) and the hints users read
  python3-mypy
  "$@"
)

# ONNX Runtime runs the exported graphs in the tests and examples/export_onnx.py: Debian 13 has it, Debian 12 not
# (the tests then check the graphs only, and say so).
optional=(python3-onnxruntime)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
# The optional packages not installed that the release offers (after apt-get update, in a fresh root).
available_optional() {
  local p
  for p in "${optional[@]}"; do
    if ! installed "$p" && apt-cache show "$p" > /dev/null 2>&1; then echo "$p"; fi
  done
}

missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
mapfile -t extras < <(available_optional)

if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" -ne 0 ]; then
  echo "bootstrap: missing Debian packages: ${missing[*]}" >&2
  echo "bootstrap: run as root, or: sudo apt-get install ${missing[*]} ${extras[*]}" >&2
  exit 1
fi
if [ ${#extras[@]} -gt 0 ] && [ "$(id -u)" -ne 0 ]; then
  echo "bootstrap: optional Debian packages not installed: ${extras[*]} (sudo apt-get install ${extras[*]})" >&2
  extras=()
fi
if [ ${#missing[@]} -gt 0 ] || [ ${#extras[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  mapfile -t extras < <(available_optional)  # the package lists may have been empty before the update
  echo "bootstrap: installing ${missing[*]} ${extras[*]}"
  apt-get install -y -qq --no-install-recommends "${missing[@]}" "${extras[@]}"
fi

# The python3 on PATH may be a build without NumPy: always use Debian's interpreter.
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
