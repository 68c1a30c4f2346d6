#!/usr/bin/env bash
# Build benchmarks/brgemm_harness.c once per register blocking x K unroll and run each:
#     bash benchmarks/brgemm_harness.sh [MRxNVxKUNROLL ...]     (default: 14x2x8 14x2x16)
# Needs gcc and an AVX-512 CPU.  The binaries go to a temporary folder.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
impls="$here/../pplpy/engines/x86/impls"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
flags="-O3 -fno-trapping-math -pthread -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx2 -mfma"
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(14x2x8 14x2x16)
gcc --version | head -1
for v in "${variants[@]}"; do
    IFS=x read -r mr nv ku <<< "$v"
    gcc $flags -I"$impls" -DPPL_MR="$mr" -DPPL_NV="$nv" -DPPL_KUNROLL="$ku" \
        "$here/brgemm_harness.c" -o "$out/bk_$v" -lm 2>/dev/null &
done
wait
for v in "${variants[@]}"; do
    echo "== MR x NV x K unroll = $v"
    "$out/bk_$v"
done
