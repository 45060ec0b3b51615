#!/usr/bin/env bash
# The kernel-vocabulary rules (docs/design.md, "Kernel vocabulary"), checked:
#  1. raw intrinsics, vector typedefs, target attributes (the instruction levels) and builtin prefetches only in
#     csrc/src/detail/;
#  2. no function in csrc/src longer than 80 lines or nested deeper than 5 (clang-tidy readability-function-size).
# Usage: scripts/lint.sh BUILD_DIR   (a CMake build directory configured with CMAKE_EXPORT_COMPILE_COMMANDS=ON)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/lint.sh BUILD_DIR}
status=0

if grep -rnE '_mm_|_mm256|_mm512|__m(128|256|512)|vector_size|target_clones|target\("|__builtin_prefetch|__builtin_shuffle|__builtin_convertvector' \
     csrc --include='*.cpp' --include='*.h' | grep -v '^csrc/src/detail/'; then
  echo "lint: SIMD outside csrc/src/detail/ (use detail/simd.h and detail/rows.h)" >&2
  status=1
fi

tidy=$(command -v clang-tidy-14 || command -v clang-tidy)
report=$("$tidy" -p "$build" --quiet -checks='-*,readability-function-size' \
  -config='{CheckOptions: [{key: readability-function-size.LineThreshold, value: 80}, {key: readability-function-size.NestingThreshold, value: 5}]}' \
  -header-filter='csrc/src/.*' csrc/src/*.cpp csrc/src/detail/*.cpp 2>/dev/null | grep -E 'warning:|note:' || true)
if [ -n "$report" ]; then
  echo "$report" >&2
  echo "lint: functions over 80 lines or nesting 5 in csrc/src" >&2
  status=1
fi
[ $status -eq 0 ] && echo "lint: kernel vocabulary and function sizes OK"
exit $status
