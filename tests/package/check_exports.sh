#!/usr/bin/env bash
# Usage: check_exports.sh <libqattn.so> <include/qattn/qattn.h> <expected SONAME>
# Fails when the library's SONAME is not the expected one, when a function of the C API is not exported,
# or when an internal symbol is (internal namespaces, the bundled code's dependencies): the library is
# built with hidden visibility and exports only what include/qattn/export.h marks.
set -euo pipefail
lib=$1 header=$2 expected_soname=$3
fail=0

soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
if [ "$soname" != "$expected_soname" ]; then
  echo "SONAME is '$soname', expected '$expected_soname'"; fail=1
fi

raw=$(nm -D --defined-only "$lib")
c_api=$(grep -oE '\bqattn_[a-z_]+\(' "$header" | tr -d '(' | sort -u)
[ -n "$c_api" ] || { echo "no C API functions found in $header"; exit 1; }
for fn in $c_api; do
  if ! grep -qE "^[0-9a-f]+ T ${fn}\$" <<<"$raw"; then echo "C API function not exported: $fn"; fail=1; fi
done
# Demangled names of the defined symbols, without address and type.
names=$(nm -DC --defined-only "$lib" | sed -E 's/^[0-9a-f]+ . //')
# Public C++ API, so that an export region lost from the headers is noticed too.
for fn in 'qattn::parse_spec(' 'qattn::Runtime::Runtime(' 'typeinfo for qattn::Error'; do
  grep -qF "$fn" <<<"$names" || { echo "public C++ symbol not exported: $fn"; fail=1; }
done
internal='^(qattn::(rt|cache|cli|dev|text|detail|decode|kv|fp|sas|prefill_fp)::|qattn::Runtime::Impl::|(typeinfo|vtable|VTT) for qattn::(rt|cache|cli|dev|text)::|sqlite3|nlohmann::|quant::|tile_order::|lse_correction::)'
leaked=$(grep -E "$internal" <<<"$names" || true)
if [ -n "$leaked" ]; then
  echo "internal symbols exported ($(wc -l <<<"$leaked")), e.g.:"; head -20 <<<"$leaked"; fail=1
fi

count=$(wc -l <<<"$names")
if [ "$fail" = 0 ]; then
  echo "ok: SONAME $soname, $(wc -w <<<"$c_api") C API functions exported, $count dynamic symbols, no internals"
fi
exit "$fail"
