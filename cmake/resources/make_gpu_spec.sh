#!/usr/bin/env bash
# Writes a CTest resource spec with one slot per visible GPU, for
#   ctest -L gpu -j N --resource-spec-file gpus.json
# Each GPU test asks for "gpus:1" (kernels/CMakeLists.txt) and pins itself to the GPU CTest gives
# it (CTEST_RESOURCE_GROUP_0_GPUS -> CUDA_VISIBLE_DEVICES), so N tests run on N GPUs at once.
#   cmake/resources/make_gpu_spec.sh > build/gpus.json
set -euo pipefail
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
ids=""
for ((i = 0; i < n; i++)); do ids+="${ids:+, }{\"id\": \"$i\", \"slots\": 1}"; done
printf '{\n  "version": {"major": 1, "minor": 0},\n  "local": [{"gpus": [%s]}]\n}\n' "$ids"
