#!/usr/bin/env bash
# Usage: consumer_test.sh <qattn build dir> <consumer source dir> <cmake> <generator> <cc> <c++> [<python3>]
# Installs the build into a temporary prefix and uses it as an application would: every installed header
# compiles on its own with only <prefix>/include on the include path; consumer/ configures with
# find_package(qattn), builds and runs (C++ and C); the installed CLI runs; the installed Python package
# finds the installed library by itself. All without LD_LIBRARY_PATH: the installed files' RUNPATH must
# lead to libnvrtc, and the consumer's own link to libqattn alone.
set -euo pipefail
unset LD_LIBRARY_PATH QATTN_LIBRARY
build=$1 consumer=$2 cmake=$3 generator=$4 cc=$5 cxx=$6 python=${7:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/qattn_package.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
step() { echo "== $*"; }

step "install into $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log"
for f in include/qattn/qattn.h include/qattn/export.h include/qattn/abi.h include/qattn/runtime.hpp \
         bin/qattn; do
  [ -e "$prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done
config=$(find "$prefix" -name qattnConfig.cmake)
[ -n "$config" ] || { echo "not installed: qattnConfig.cmake"; exit 1; }
libdir=$(dirname "$(dirname "$(dirname "$config")")")
real=$(readlink -f "$libdir/libqattn.so")
soname=$(objdump -p "$real" | awk '$1 == "SONAME" {print $2}')
[ -L "$libdir/libqattn.so" ] && [ -n "$soname" ] && [ -L "$libdir/$soname" ] && [[ "$real" == */"$soname".* ]] ||
  { echo "expected libqattn.so -> $soname -> $soname.<minor>.<patch> in $libdir"; ls -l "$libdir"; exit 1; }

step "each installed header compiles alone against $prefix/include"
for h in "$prefix"/include/qattn/*.hpp; do
  echo "#include \"qattn/$(basename "$h")\"" | "$cxx" -std=c++17 -fsyntax-only -x c++ -I "$prefix/include" - ||
    { echo "installed header does not compile on its own: $h"; exit 1; }
done
echo '#include "qattn/qattn.h"' | "$cc" -std=c99 -fsyntax-only -x c -I "$prefix/include" - ||
  { echo "qattn.h does not compile as C"; exit 1; }

step "configure and build consumer/ with find_package(qattn)"
"$cmake" -S "$consumer" -B "$work/build" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log" ||
  { cat "$work/configure.log"; exit 1; }
"$cmake" --build "$work/build" --verbose >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
if grep -E -- '-I[^ ]*/templates|-isystem [^ ]*cuda|nvrtc|sqlite' "$work/build.log"; then
  echo "the consumer's command lines carry qattn's templates, CUDA or SQLite: the interface is not minimal"
  exit 1
fi

step "run the C++ consumer"
out=$("$work/build/spec_check" "prefill pv=fp16 qk=int8:per_token out=fp16 causal d=128 arch=sm_90a")
echo "$out"
grep -qx "canonical: prefill qk=int8:per_token pv=fp16 out=fp16 d=128 causal arch=sm_90a" <<<"$out"
grep -q "^kernel: qattn_prefill_sm90a_" <<<"$out"
status=0
err=$("$work/build/spec_check" "prefill qk=int9 pv=fp16 out=fp16 d=128" 2>&1) || status=$?
echo "$err"
[ "$status" = 2 ] || { echo "a bad spec exited $status, expected 2 (qattn::Error caught by type)"; exit 1; }
grep -q "int9" <<<"$err"

step "run the C consumer"
export QATTN_CACHE_DIR=$work/cache
c_out=$("$work/build/c_api_check")
echo "$c_out"
version=$(sed -n 's/^version: //p' <<<"$c_out")

step "run the installed CLI"
"$prefix/bin/qattn" --help >"$work/cli.txt"
grep -q compile "$work/cli.txt" || { cat "$work/cli.txt"; exit 1; }

if [ -n "$python" ]; then
  step "the installed Python package loads the installed library"
  python_dir=$(find "$prefix" -type d -path '*/qattn/python' | head -1)
  loaded=$(PYTHONPATH="$python_dir" PYTHONDONTWRITEBYTECODE=1 "$python" -c \
    'import qattn, qattn._library as lib; print(qattn.version()); print(lib._loaded_path)')
  echo "$loaded"
  [ "$(head -1 <<<"$loaded")" = "$version" ] || { echo "the Python package reports another version"; exit 1; }
  [[ "$(tail -1 <<<"$loaded")" == "$libdir"/libqattn.so* ]] ||
    { echo "the Python package loaded $(tail -1 <<<"$loaded"), not the library in $libdir"; exit 1; }
fi
echo "ok: installed package used by an out-of-tree consumer (C++, C, CLI${python:+, Python})"
