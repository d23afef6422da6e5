#!/usr/bin/env bash
# Installs what qattn needs to build and test on Debian/Ubuntu, by package name. The CUDA toolkit
# (NVRTC + headers; no GPU or driver needed) is expected at /usr/local/cuda or $CUDA_HOME.
set -euo pipefail
# python3-pip and python3-venv: python/tests/test_packaging.py installs the wheel into a venv.
pkgs=(cmake ninja-build g++ libsqlite3-dev nlohmann-json3-dev libgtest-dev python3-pytest python3-pip python3-venv)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
cuda="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -f "$cuda/include/nvrtc.h" ]; then
  echo "qattn: the CUDA toolkit (nvrtc.h, libnvrtc) is not at $cuda; install CUDA 12.x/13.x or set CUDA_HOME" >&2
  exit 2
fi
