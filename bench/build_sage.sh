#!/usr/bin/env bash
# Builds SageAttention2's Hopper kernel (the peer of the prefill benchmark, bench/peers/sage.py) on the GPU
# machine from the copy in ../shared/peers/sageattention, into a folder that is not part of the project.
#
#   bash bench/build_sage.sh SOURCE_DIR BUILD_DIR     (then: export PYTHONPATH=BUILD_DIR:$PYTHONPATH)
#
# SOURCE_DIR: a copy of ../shared/peers/sageattention (carry it to the GPU machine in an ignored folder).
# Needs the machine's torch, nvcc and Python headers; about 160 s on 16 cores. A BUILD_DIR that already
# holds the two extension modules is reused.
set -euo pipefail
src=${1:?source folder (a copy of ../shared/peers/sageattention)}
dst=${2:?build folder}
if compgen -G "$dst/sageattention/_qattn_sm90*.so" > /dev/null && compgen -G "$dst/sageattention/_fused*.so" > /dev/null; then
  echo "build_sage.sh: $dst already holds the built modules"
  exit 0
fi
mkdir -p "$dst"
cp -r "$src"/. "$dst"/
cd "$dst"
MAX_JOBS=${MAX_JOBS:-$(nproc)} python3 setup_min.py build_ext --inplace > build.log 2>&1 || { tail -30 build.log; exit 1; }
python3 -c "import sys; sys.path.insert(0, '.'); from sageattention import sm90_compile; print('build_sage.sh: ok')"
