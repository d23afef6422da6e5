#!/usr/bin/env bash
# Usage: subproject_test.sh <qattn source dir> <subproject dir> <cmake> <generator> <cc> <c++> [<CUDA root>]
# Configures subproject/ (qattn under add_subdirectory) in a temporary folder; its CMakeLists.txt fails
# the configure when qattn's subproject defaults or its target are wrong.
set -euo pipefail
src=$1 dir=$2 cmake=$3 generator=$4 cc=$5 cxx=$6 cuda=${7:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/qattn_subproject.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$cmake" -S "$dir" -B "$work" -G "$generator" -DQATTN_SOURCE_DIR="$src" -DCMAKE_C_COMPILER="$cc" \
  -DCMAKE_CXX_COMPILER="$cxx" ${cuda:+-DCUDAToolkit_ROOT="$cuda"} >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; exit 1; }
grep "qattn as a subproject" "$work/configure.log"
