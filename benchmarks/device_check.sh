#!/usr/bin/env bash
# One call's worth of measurements on a lent machine (the 16-core Xeon), in priority order,
# each step with its own time limit, everything written to $OUT as it goes:
#     bash benchmarks/device_check.sh [threads, default 1,4,16] [all|diag|suite|lease]
# Build (about 2 min on 16 cores), then the diagnostics ("diag"): which CPUs share a core
# (core_sharing.py), brgemm.py and the C harness on one core (the module against the header
# alone), a ResNet-50 profile at 1, 4 and 16 threads and a GPT-2 one at 1 and 4 (per-node
# items; 4 also unbound), MobileNetV2 at one thread and ORT's per-op profiles beside them
# (ort_profile.py), GPT-2 and ResNet-50 at 4 threads on three CPU sets (hidden
# hyper-threads), GPT-2, BERT and ResNet-50 at 4 and 16 threads with fixed shares and with
# items claimed as steps run, the transformer GEMMs with cold weights (cold_gemm.py); then
# ("suite") the whole suite against ONNX Runtime.  All of it takes about 13 minutes: where
# one call's limit would cut the suite, run "diag" and "suite" as two calls.
# "lease" is what fits one call of a 15-minute lease (the start takes one or two of them):
# build, core sharing, brgemm.py, the suite, per-node profiles for the last lease's open
# questions, then the full test suite on this machine's tier with the time left; every step
# stops at $DEADLINE_S seconds after the script began (default 530), so its output always
# comes back.  Pitfalls it avoids, both met on the device: files the tool does not copy
# (.gitignore'd ones, such as *.c outside benchmarks/) and a bare `wait` in a script whose
# output goes through a process substitution (it waits for the tee too, until the call's
# limit).
set -u
out="${OUT:-$(mktemp -d)}"
threads="${1:-1,4,16}"
parts="${2:-all}"
case "$parts" in
    all|diag|suite|lease) ;;
    *) echo "parts: all, diag, suite or lease, not $parts"; exit 2;;
esac
deadline=$(( SECONDS + ${DEADLINE_S:-$([ "$parts" = lease ] && echo 530 || echo 100000)} ))
cpu="${CPU:-2}"   # the core of the one-core measurements
repo="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$out"
log="$out/device_check.txt"
say() { echo "[$(date +%T)] $*" | tee -a "$log"; }
step() {  # step LIMIT_S NAME CMD...: run CMD from /tmp (the installed pplpy), log its output;
    # LIMIT_S is cut to what is left before the deadline, and a step with under 5 s is skipped
    local limit=$1 name=$2 left=$(( deadline - SECONDS )); shift 2
    [ "$left" -lt "$limit" ] && limit=$left
    [ "$limit" -lt 5 ] && { say "   ($name: skipped, deadline)"; return; }
    say "== $name (limit ${limit} s)"
    (cd /tmp && timeout "$limit" "$@") >> "$log" 2>&1 || say "   ($name: exit $?)"
}
say "$(lscpu | grep -E 'Model name' | tr -s ' '), $(nproc) CPUs"
# which CPUs share a core, a cache or a node (the workers are bound to consecutive CPUs)
lscpu -e >> "$log" 2>&1
say "== build"
(cd "$repo" && python3 -m pip install -q --no-build-isolation --no-deps . ) >> "$log" 2>&1 \
    || { say "build failed"; exit 1; }
if [ "$parts" = lease ]; then
    step 30 "core sharing" python3 "$repo/benchmarks/core_sharing.py"
    step 40 "brgemm.py (one core)" taskset -c "$cpu" python3 "$repo/benchmarks/brgemm.py" \
        --tiers avx512,fma
    # session 20's Winograd rule (share V between panel groups only up to 768 KiB) on a team
    for t in 4 16; do
        step 30 "Winograd panel groups, $t threads" python3 \
            "$repo/benchmarks/winograd_groups.py" --threads "$t"
    done
    step 260 "suite, threads $threads" python3 "$repo/benchmarks/run.py" \
        --threads "$threads" --warmup 2 --repeats 5 --no-openvino --json "$out/suite.json"
    # Session 29 (a 2-core Xeon, one thread): ResNet-50's 256 -> 256 Winograd layers at
    # 14 x 14 took twice their warm time in the model (their 9.4 MB packed weights from
    # memory); with those layers direct the model was 5-8% faster (best, lower quartile),
    # Inception v2 4-8%. Does a team, sharing the memory bandwidth, lose more?
    step 60 "Winograd on 14 x 14 wide layers or not, 4 and 16 threads" python3 \
        "$repo/benchmarks/winograd_cold.py" --threads 4,16 --rounds 6
    # Session 20's open questions, per node: ResNet-18's Winograd layers scaled 1.1-1.6x
    # from one thread to four there (its direct ones 2.2-2.9x): the same layers at 1 and 4
    # threads, and at 4 with every layer direct; GPT-2 took 37 ms more than BERT at one
    # thread there (the same GEMM FLOPs; 3 ms less on the EPYC)
    [ $(( deadline - SECONDS )) -gt 75 ] && timeout 60 python3 "$repo/benchmarks/models.py" \
        --save "$out/models" --models resnet18,gpt2_small,bert_base >> "$log" 2>&1
    for t in 1 4; do
        step 30 "ResNet-18 profile, $t threads" python3 -m pplpy.tools.pplnn \
            --onnx-model "$out/models/resnet18.onnx" --num-threads "$t" --enable-profiling \
            --warmup-iterations 3 --min-profiling-iterations 20
    done
    step 30 "ResNet-18 profile, 4 threads, every conv direct" env PPLPY_CONV_ALGO=direct \
        python3 -m pplpy.tools.pplnn --onnx-model "$out/models/resnet18.onnx" \
        --num-threads 4 --enable-profiling --warmup-iterations 3 --min-profiling-iterations 20
    for m in gpt2_small bert_base; do
        step 40 "$m profile, 1 thread" python3 -m pplpy.tools.pplnn \
            --onnx-model "$out/models/$m.onnx" --num-threads 1 --enable-profiling \
            --warmup-iterations 1 --min-profiling-iterations 3
    done
    step 40 "gpt2_small, ORT per op, 1 thread" python3 "$repo/benchmarks/ort_profile.py" \
        "$out/models/gpt2_small.onnx" --threads 1 --runs 3 --nodes 12
    rm -rf "$out/models"
    # last, with what is left: the whole test suite on this machine's tier, from the checkout
    # with the source tree off sys.path (-P); about 3 minutes on 14 workers (session 20, when
    # the run had not exited 70 s after its last test: unbuffered output, a test's stacks
    # after 60 s, and the python processes left when the run's own limit stops it)
    # the run's own limit ends 15 s before the step's (200 s or what is left), so the
    # process list and the tail still print
    left=$(( deadline - SECONDS )); [ "$left" -gt 200 ] && left=200
    left=$(( left - 15 )); [ "$left" -lt 5 ] && left=5
    step 200 "tests, 14 workers (all output: tests.txt)" bash -c "cd '$repo' && \
        PYTHONUNBUFFERED=1 timeout -k 5 $left python3 -P -m pytest -q -n 14 \
        -p no:cacheprovider -o faulthandler_timeout=60 tests > '$out/tests.txt' 2>&1; \
        s=\$?; ps -eo pid,etime,args | grep '[p]ython3' | cut -c1-150; \
        tail -25 '$out/tests.txt'; exit \$s"
fi
if [ "$parts" = all ] || [ "$parts" = diag ]; then
    step 60 "core sharing (peak loop on CPU 0 and each other CPU at once)" \
        python3 "$repo/benchmarks/core_sharing.py"
    step 60 "brgemm.py (one core)" taskset -c "$cpu" python3 "$repo/benchmarks/brgemm.py" \
        --tiers avx512,fma
    step 60 "C harness (one core)" taskset -c "$cpu" bash "$repo/benchmarks/brgemm_harness.sh" \
        14x2x8
    python3 "$repo/benchmarks/models.py" --save "$out/models" \
        --models resnet50,gpt2_small,mobilenet_v2 >> "$log" 2>&1
    for t in 1 4 16; do
        step 60 "ResNet-50 profile, $t threads" python3 -m pplpy.tools.pplnn \
            --onnx-model "$out/models/resnet50.onnx" --num-threads "$t" --enable-profiling \
            --warmup-iterations 3 --min-profiling-iterations 10
    done
    # GPT-2 scaled 2.1-2.4x from 1 to 4 threads on the Xeon (ORT 2.9-3.6x, unbound
    # threads), but 6.4x at 16 (ORT 6.2x): its GEMMs per node, and 4 threads without
    # binding (if two of the CPUs the workers are bound to share a core, only 4 threads
    # would suffer, not 1 or 16)
    for t in 1 4; do
        step 60 "GPT-2 profile, $t threads" python3 -m pplpy.tools.pplnn \
            --onnx-model "$out/models/gpt2_small.onnx" --num-threads "$t" --enable-profiling \
            --warmup-iterations 2 --min-profiling-iterations 5
    done
    step 60 "GPT-2 profile, 4 threads, unbound" python3 -m pplpy.tools.pplnn \
        --onnx-model "$out/models/gpt2_small.onnx" --num-threads 4 --no-bind-threads \
        --enable-profiling --warmup-iterations 2 --min-profiling-iterations 5
    # MobileNetV2 ran at 0.82 of ORT at one thread on the Xeon (1.0 on the EPYC): both per node
    step 60 "MobileNetV2 profile, 1 thread" python3 -m pplpy.tools.pplnn \
        --onnx-model "$out/models/mobilenet_v2.onnx" --num-threads 1 --enable-profiling \
        --warmup-iterations 5 --min-profiling-iterations 40
    step 60 "MobileNetV2, ORT per op, 1 thread" python3 "$repo/benchmarks/ort_profile.py" \
        "$out/models/mobilenet_v2.onnx" --threads 1 --runs 40 --nodes 15
    step 60 "GPT-2, ORT per op, 4 threads" python3 "$repo/benchmarks/ort_profile.py" \
        "$out/models/gpt2_small.onnx" --threads 4 --runs 5
    rm -rf "$out/models"
    # Hidden hyper-threads: if the guest's CPUs 0 and 1 (or 0 and 8) are one host core that
    # lscpu shows as two, a team bound to CPUs 0-3 gets two cores.  The same 4-thread runs,
    # both engines, confined to CPUs 0-3, to even ones and to every fourth: a set far faster
    # than 0-3 says which CPUs share a core (core_sharing.py above says it directly).
    for set in 0-3 0,2,4,6 0,4,8,12; do
        step 90 "4 threads on CPUs $set (pplpy and ORT)" taskset -c "$set" python3 \
            "$repo/benchmarks/run.py" --threads 4 --models gpt2_small,resnet50 --warmup 2 \
            --repeats 5 --no-openvino
    done
    # Items claimed as a step runs (the default) against fixed shares: if a thread of the
    # 4-thread team runs slower (a hidden sibling, a busy host), fixed shares wait for it
    for v in 1 0; do
        step 120 "4 and 16 threads, PPLPY_STATIC_SHARES=$v" env PPLPY_STATIC_SHARES="$v" \
            python3 "$repo/benchmarks/run.py" --threads 4,16 \
            --models gpt2_small,bert_base,resnet50 --warmup 2 --repeats 5 --no-openvino
    done
    # the transformer GEMMs with cold weights, pplpy (at several B-prefetch distances) and ORT
    step 150 "cold GEMMs" python3 "$repo/benchmarks/cold_gemm.py" --threads 1,4 \
        --prefetch 0,4,8,16 --rounds 2
fi
if [ "$parts" = all ] || [ "$parts" = suite ]; then
    step 330 "suite, threads $threads" python3 "$repo/benchmarks/run.py" \
        --threads "$threads" --warmup 2 --repeats 5 --no-openvino --json "$out/suite.json"
fi
say "done"
