#!/bin/bash
# Issue 44, rounds six and seven (docs/speed.md): the H200's own tuned entries, timed against
# the tree before them. From the repository root, no install (a PYTHONPATH shim), one phase a
# GPU call:
#   tools/i44_tune_gpu.sh tune-w4a8   the W4A8 planes' CUDA test (tests/kernels/test_int4_pairs.py),
#       then `moecert tune --M 16,64 --routings 3` of W4A8 on the three layers (up to 520 s;
#       Mixtral-8x7B at M 64 outran 90 s alone)
#   tools/i44_tune_gpu.sh tune-fp     MXFP4 on Mixtral-8x7B and DeepSeek-V3, MXFP8 on the
#       three layers (~250 s)
#     Both write into the tree's own kernels/triton_moe/configs/ (the merge keeps every entry
#     already there) and return h200.json in the tar: copy it back into the checkout before the
#     next call (a machine idle for a minute is released with its /tmp: 2026-12-01, call 2).
#     Each step has its own limit; the tuner writes after every layer and M, so a step cut
#     short keeps what it measured.
#   tools/i44_tune_gpu.sh bench   decode at M 16 / 64 with the Marlin FP4 peer, the files of
#       .bench/base-configs (the tree before, carried) against the tree's own, in one process
#       each; then the `ci` suite on cuda with the tree's files (verdicts; its wall on one GPU).
#   tools/i44_tune_gpu.sh tune-nvfp4   round seven: NVFP4 on Mixtral-8x7B and DeepSeek-V3 (whose
#       H200 entries date from 2026-11-26, before rounds two to six changed the kernel), twice:
#       with the scale bytes (NVFP4's default) into cfg-bytes, and with its scales decoded into
#       bf16 at load (MOECERT_TRITON_FP4_SCALE_BF16=1) into cfg-bf16, each a copy of the tree's
#       configs; both folders come back in the tar: put them at .bench/nvfp4-bytes and
#       .bench/nvfp4-bf16 for `round7`
#   tools/i44_tune_gpu.sh round7  NVFP4 decode (Marlin FP4 peer) with the tree's files, then each
#       tuned folder; prefill at M 1024 / 4096 on Mixtral
#       (triton bf16 / fp8 / gptq-int4 / mxfp4 / nvfp4, grouped mxfp4 / nvfp4); one process each
#   tools/i44_tune_gpu.sh int4-lookup   gptq-int4 on Mixtral-8x7B and DeepSeek-V3 at M 256 / 1024
#       / 4096, the tree before 72fc57e (.bench/before, carried) against the tree: int4 layers
#       reading their own file at every size against round six's nearest bucket across files
#   tools/i44_tune_gpu.sh tune-stale   the one H200 entry whose recorded tuned time is far from
#       what the kernel now runs it in (as NVFP4's were before round seven): MXFP4 on
#       gpt-oss-120b, tuned 2026-11-26 at 432.5 us for M 16 (bucket 64), now 293.7 us, 1.08x
#       matmul_ogs; into the tree's configs (then `bench` with .bench/base-configs = the
#       configs before). Every other entry's record is at or below this session's bench time
#       of its layer (0-16% below: the bench times routing and activation too), as for a tile
#       tuned on the kernel that runs now; this one is 1.47x above it.
#   tools/i44_tune_gpu.sh tune-awq   awq-int4 on the three layers into the tree's configs: its
#       own W_INT4_ZERO entries since 2026-12-01 (heuristics.KEY_FALLBACK: it read gptq-int4's
#       W_INT4 entries, and tuning it under that key wrote over them); then
#       `I44_SCHEMES=awq-int4 tools/i44_tune_gpu.sh bench` against .bench/base-configs
#   tools/i44_tune_gpu.sh stages-awq   tools/layer_stages.py on gpt-oss-120b MXFP4 at M 16 and 64,
#       tools/ogs_peer.py (matmul_ogs with and without its routing() in the graph), then
#       tune-awq's two steps (h200.json in the tar, as `tune`)
#   tools/i44_tune_gpu.sh tune-awq-m64   Mixtral-8x7B awq-int4 at M 64 alone (stages-awq's first
#       step ran out of time after its M 16 on 2026-12-01)
#   tools/i44_tune_gpu.sh table   the issue's decode table in one call (round eight): FP4 with
#       Marlin FP4, matmul_ogs, then W4A8 / MXFP6 / MXFP8 / AWQ / gptq-int4 (Marlin int4 beside
#       gptq); last AWQ with .bench/base-configs (its entries before its own key). No prefill
#       (unchanged since round seven but gptq-int4's lookup, timed then): the table's limits
#       leave it no room in 600 s with a cold Triton cache
#   tools/i44_tune_gpu.sh awq-m1   awq-int4's M 1 bucket on Qwen3-30B-A3B and DeepSeek-V3 (its own
#       entries from stages-awq have none; W_INT4's, which it read before, do), then awq-int4 at
#       M 1 / 16 / 64, the tree against .bench/base-configs
#   tools/i44_tune_gpu.sh peer-routing   gpt-oss-120b MXFP4 (bench) and matmul_ogs timed on the
#       bench's own routings (tools/ogs_peer.py since 2026-12-01), one call
#   tools/i44_tune_gpu.sh w4a8-m64   w4a8-int8 on Mixtral-8x7B at M 64 (its entry holds only M 16's
#       bucket) with `--max-seconds 80`, then M 16 / 64 against .bench/base-configs
#   tools/i44_tune_gpu.sh prefill   round nine: bf16 and fp8-w8a8 on Mixtral-8x7B tuned at M 1024 /
#       4096 (70 s a size), then prefill (bf16, fp8, the FP4 dispatch) against
#       .bench/base-configs, then tools/layer_stages.py on bf16 at M 4096 (~520 s)
#   tools/i44_tune_gpu.sh swap   prefill_sweep's swapped tiles (the weight tile as the MMA's first
#       operand) for gptq-int4 / mxfp4 / nvfp4 on Mixtral-8x7B at M 1024 / 4096, then three
#       W16 / fp8 prefill tiles on DeepSeek-V3 and Qwen3-30B-A3B at M 4096 (~400 s)
#   tools/i44_tune_gpu.sh round9   round nine's heuristics against the tree before them (.bench/before,
#       carried): prefill rows of the four layers, one process each, then the FP4 dispatch
#       forced at Mixtral-8x7B M 2048 (~450 s)
#   tools/i44_tune_gpu.sh verify   tools/gpu_ci.sh (suite cut at 200 s), the swapped default tile
#       checked at model size on AWQ / gpt-oss, the prefill table with the grouped peer (~480 s)
#   tools/i44_tune_gpu.sh tune-prefill   the prefill CUDA test and the FP8 folders, then gptq-int4
#       (M 1024 / 4096) and mxfp4 (M 1024, fused) on Mixtral-8x7B tuned at prefill sizes and
#       benched against the configs before (~470 s)
#   tools/i44_tune_gpu.sh edges   round nine's heuristics at 64-128 rows per expert (Mixtral M 256 /
#       512, gpt-oss M 1024 / 2048) and Mixtral M 2048, against .bench/before (~90 s)
#   tools/i44_tune_gpu.sh decode-check   Mixtral-8x7B bf16 / fp8-w8a8 / gptq-int4 at M 1 / 16 / 64,
#       the tree against the session's start (.bench/start, carried) (~60 s)
#   tools/i44_tune_gpu.sh tune-qwen   NVFP4 (bf16 scales, the default since round seven) and
#       MXFP4 on Qwen3-30B-A3B, which had no H200 entry for either, into the tree's configs
#   tools/i44_tune_gpu.sh fused   round ten: the activation in GEMM1's epilogue against the
#       activation kernel (MOECERT_TRITON_FUSED_ACT 0 / halves / adjacent, the same tree): its
#       CUDA test, then prefill (Mixtral-8x7B M 1024 / 4096; the unfused process twice) and
#       decode (three layers, M 16 / 64) (~330 s)
#   tools/i44_tune_gpu.sh fused-verify   after `GPU_CI_SUITE_S=200 bash tools/gpu_ci.sh` (its
#       own call): the two FP8 folders, the prefill table with the activation kernel and with
#       the tree's default (FUSED_ACT entries), the grouped peer (~300 s)
#   tools/i44_tune_gpu.sh tune-m64   W4A8 and AWQ on Mixtral-8x7B tuned at M 64 into a copy of
#       the configs (cfg/ in the tar), M 16 / 64 benched with the tree's files and the copy (~470 s)
#   tools/i44_tune_gpu.sh m64-edges   the other sizes those entries answer, against the files
#       before them (.bench/m64-before, carried) (~100 s; I44_M, I44_SCHEME: other rows)
#   tools/i44_tune_gpu.sh tune-fused   the tuner's FUSED_ACT choice where the bench timed the
#       fused epilogue slower (fp8-w8a8 M 4096, mxfp4 M 1024) and faster (bf16 M 4096), cut
#       searches into a copy (~230 s)
#   tools/i44_tune_gpu.sh fp8-fused   (not run yet: for the next GPU session) SCALE_RUNS' CUDA
#       test, then fp8-w8a8 unfused / the tree's entries / fused everywhere, decode and prefill
#       on Mixtral-8x7B and DeepSeek-V3 (~300 s)
#   tools/i44_tune_gpu.sh r11   round eleven: SCALE_COLS and E8M0_NORMAL against the tree before
#       them (.bench/r11-base, carried: git archive f9aeeee), decode of MXFP8, MXFP6, gptq-int4,
#       W4A8, fp8-w8a8 on the three layers; the `ci` suite on cuda; fp8-w8a8 Mixtral M 4096
#       fused everywhere against the tree (SCALE_RUNS' first timing) (~500 s)
#   tools/i44_tune_gpu.sh r11b  Mixtral-8x7B MXFP8 M 16 / 64, the tree and .bench/r11-base twice
#       each, and MXFP8 re-tuned there at M 64 (~230 s)
#   tools/i44_tune_gpu.sh table-r11   `table` without AWQ's files before, its watchdog at 300 s
#       (carry .vllm's library and tk) (~230 s)
#   tools/i44_tune_gpu.sh r12   round twelve: W4A8's codes in the compute dtype (and AWQ's
#       zero points in int16, since reverted) against .bench/r12-base (git archive 977fde3,
#       carried): two CUDA test files, decode of awq / w4a8 / gptq, prefill of W4A8 / AWQ (~160 s)
#   tools/i44_tune_gpu.sh r12-tune   W4A8 re-tuned at M 16 / 64 on Qwen3 and Mixtral into a
#       copy, then the tree against it (~260 s)
#   tools/i44_tune_gpu.sh r12-words  E4M3_WORDS' CUDA test, MXFP8 / MXFP6 decode bytes / words /
#       bytes; W4A8 at M 1-128 against .bench/r12t-before (the configs before r12-tune) (~110 s)
#   tools/i44_tune_gpu.sh r12-m1   Mixtral W4A8 tuned at M 1, then M 1-4 before / tree / tuned
#       (carry .bench/r12t-before) (~130 s)
#   (`fold`, the MXFP8 fold candidate's phase, and round7's two fold benches ran on 2026-12-01:
#   1.02-1.31x slower than the tiles on every row; the candidate was removed: git log.)
#   tools/i44_tune_gpu.sh r13   round thirteen: AWQ's zero points from the activation sums
#       (ZERO_SUMS): its CUDA tests and the planes' tests, then AWQ decode on the three layers
#       with the sums / in the decode / with the sums again (gptq-int4 the control in the first),
#       AWQ prefill on Mixtral-8x7B both ways, one process each (~330 s)
#   tools/i44_tune_gpu.sh r13-tune   AWQ re-tuned with ZERO_SUMS a per-GEMM choice (Qwen3 and
#       Mixtral at M 16 / 64) and W4A8 on DeepSeek-V3 (its entries predate its codes in bf16),
#       into a copy, then the tree's files against it (~480 s)
#   tools/i44_tune_gpu.sh table-r13   ZERO_SUMS' CUDA test and the `ci` suite's AWQ cases on
#       cuda with every int4 linear in planes (MOECERT_TRITON_NIB_SPAN=128: the sums path), then
#       the decode table with the peers (carry .vllm's library and tk), then the lookups
#       r13-tune's entries moved against .bench/r13-before (carried) (~420 s)
#   tools/i44_tune_gpu.sh r14   round fourteen: MXFP8's words from their bit fields times the
#       tile's scale (E4M3_SCALED_WORDS): its CUDA test, then MXFP8 / MXFP6 decode, the tree /
#       .bench/r14-base (git archive 637bd11, carried) / the tree, one process each, then the
#       `ci` suite's MXFP8 / MXFP6 cases on cuda (~400 s)
#   tools/i44_tune_gpu.sh r14b   the scaled words' tiles over any number of scale blocks: the
#       CUDA test, MXFP8 decode tree / base / BLOCK_K 64, then MXFP8 re-tuned into a copy and
#       timed (carry .bench/r14-base) (~480 s)
#   tools/i44_tune_gpu.sh table-r14   MXFP6 decode and MXFP8 prefill against .bench/r14-base,
#       the decode table with the peers, MXFP8 Mixtral M 64 tuned into a copy (carry .vllm and
#       .bench/r14-base with its kernels/ only: the rest is unchanged since 637bd11, and the
#       whole base put the call past 64 MiB) (~450 s)
#   tools/i44_tune_gpu.sh gptq-m16   gptq-int4 Mixtral-8x7B M 16 tuned for 90 s into a copy, then
#       the tree and the copy with Marlin int4 beside (carry .vllm) (~320 s; its first run,
#       2026-12-02, cut both benches at 50 s: the tuner kept the shipped tiles, 231.0 us)
#   tools/i44_tune_gpu.sh r15   round fifteen: MXFP6 in six-bit planes (MOECERT_TRITON_FP6_PLANES=1,
#       a candidate off by default). Its CUDA tests (stops there on a failure), then MXFP6 decode
#       in planes (reading MXFP8's tiles) and as e4m3 bytes, one process each, then
#       W_MXFP8_FP6 tuned at M 16 / 64 into a copy and timed (~330 s)
#   tools/i44_tune_gpu.sh r15-prefill   fp8-w8a8 Mixtral-8x7B prefill at M 1024 tuned for 100 s
#       into a copy, then the tree against it at M 1024 (~200 s)
#   tools/i44_tune_gpu.sh r16   round sixteen: TAIL_M (an expert's last row block on a smaller
#       tile) at prefill sizes: the tree's entries with MOECERT_TRITON_TAIL_M 0 / 16 / 32 / 64 on
#       Mixtral-8x7B (six schemes, M 1024 / 4096), 0 / 32 on Qwen3-30B-A3B, one process each
#       (~450 s)
#   tools/i44_tune_gpu.sh r16b  tests/kernels/test_tail_tiles_cuda.py, the `ci` suite on cuda and the real FP8 folders
#       (GPU_CI_PART=suites tools/gpu_ci.sh), then the swapped nibble prefill tile's default
#       TAIL_M (heuristics.SWAPPED_TAIL_M) against MOECERT_TRITON_TAIL_M=0, alternating
#       processes (tree, 0, tree, 0) on Mixtral-8x7B (five nibble schemes, M 1024 / 4096),
#       one pair on Qwen3-30B-A3B (~450 s)
#   tools/i44_tune_gpu.sh r16-tune   (written for the next session, not yet run) gptq-int4 and
#       nvfp4 on Mixtral-8x7B at M 1024 tuned for 100 s each into a copy of the configs (the
#       grid now holds TAIL_M at prefill sizes), then the tree against the copy at M 1024 /
#       4096, one process each (cfg/ in the tar) (~420 s)
#   tools/i44_tune_gpu.sh r18   round eighteen: int4 planes scaled inside the decode under
#       ONE_DOT: the nibble kernels' CUDA tests, then gptq-int4 / awq-int4 prefill, the default
#       against MOECERT_TRITON_ONE_DOT=0, alternating processes (~400 s)
#   tools/i44_tune_gpu.sh r19 / r19b / r19c / r19d / r20 / r20b / r20c / r20d / r21   rounds
#       nineteen to twenty-one: each phase's comment below says what it runs
# The peer: .vllm/_moe_C_stable_libtorch.abi3.so (from vLLM 0.25.1's wheel, carried).
# Results: $OUT/i41.tgz (tools/gpu_batch.sh: the folder /tmp/i44t or /tmp/i44b, with a
# watchdog tar at 560 s).
# (2026-12-01 ran an earlier form: one `tune` call whose W4A8 and MXFP4 steps were cut at
# 170 / 120 s, then those two steps again by hand; docs/gpu-ci.md, sixteenth session.)
set -u
R15_TUNE=()
cd "$(dirname "$0")/.."
SHIM=/tmp/shim; mkdir -p "$SHIM/moecert"
for d in reference kernels conformance reports; do ln -sfn "$PWD/$d" "$SHIM/moecert/$d"; done
export PYTHONPATH=$SHIM TRITON_CACHE_DIR=/tmp/i44-triton-cache PYTHONUNBUFFERED=1  # (a log cut by timeout keeps its lines)
unset TRITON_INTERPRET MOECERT_TRITON_CONFIG_DIR MOECERT_TRITON_NIB_SPAN MOECERT_TRITON_SPLIT_K
M="python -m moecert.conformance.cli"
. tools/gpu_batch.sh

gpu_versions() {
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$work/gpu.txt"
    python -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$work/gpu.txt"
}

tree_shim() {  # tree_shim .bench/NAME: /tmp/shim-NAME, a PYTHONPATH shim of that carried tree;
    # a package the carried tree leaves out is the checkout's own (unchanged since that tree:
    # carry only what differs, as the call's 64 MiB also holds .vllm)
    mkdir -p "/tmp/shim-$(basename "$1")/moecert"
    local d src
    for d in reference kernels conformance reports; do
        src=$PWD/$1/$d; [ -d "$src" ] || src=$PWD/$d
        ln -sfn "$src" "/tmp/shim-$(basename "$1")/moecert/$d"
    done
}

fp8_folders() {  # fp8_folders LIMIT_S: gpu_ci.sh's two real FP8 folders, each its own run
    local folder
    for folder in tests/fixtures/checkpoints/ct-fp8-static-qwen3moe \
                  tests/fixtures/checkpoints/modelopt-fp8-qwen3moe; do
        timeout "$1" $M run --suite ci --checkpoint "$folder" --device cuda --backend grouped \
            --backend triton --backend torch -n 4 --results "$work/folders" \
            > "$work/folder-$(basename "$folder").txt" 2>&1
        stamp "folder $(basename "$folder"): $(grep -E '^(green|not green)' "$work/folder-$(basename "$folder").txt" | tail -1)" $?
    done
}

tree_and_copy() {  # tree_and_copy DIR BENCH_ARGS...: the bench with the tree's tuned files, then
    # with the copy DIR a tune wrote into, one process each (tree/, tuned/ in the results)
    local C=$1; shift
    timeout 50 $M "$@" --results "$work/tree" --run-id tree > "$work/tree.txt" 2>&1
    stamp tree $?
    MOECERT_TRITON_CONFIG_DIR=$C timeout 50 $M "$@" --results "$work/tuned" \
        --run-id tuned > "$work/tuned.txt" 2>&1
    stamp tuned $?
}

run_cases() {  # run_cases FILE LIMIT_S [VAR=VALUE...]: each conformance case of FILE (one JSON
    # a line) through `moecert run --case` against the float64 reference, the variables set
    # for gptq-int4's cases only (case1/, case2/, ... in the results)
    local file=$1 limit=$2 i=0 case env
    local gptq_env=("${@:3}")
    while IFS= read -r case; do
        i=$((i + 1)); env=()
        [[ $case == *'"gptq-int4"'* ]] && env=("${gptq_env[@]}")
        env "${env[@]}" timeout "$limit" $M run --device cuda --case "$case" \
            --results "$work/case$i" > "$work/case$i.txt" 2>&1
        stamp "case $i" $?
    done < "$file"
}

tune_into() {  # tune_into DIR TAG STEP...: STEP is "LIMIT_S MOECERT_TUNE_ARGS..." (one string)
    local C=$1 tag=$2 n=0 step; shift 2
    for step in "$@"; do
        n=$((n + 1)); read -r -a args <<< "$step"
        MOECERT_TRITON_CONFIG_DIR=$C timeout "${args[0]}" $M tune --out "$C" --M 16,64 \
            --routings 3 "${args[@]:1}" > "$work/tune-$tag-$n.txt" 2>&1
        stamp "tune-$tag-$n (${args[*]:1})" $?
    done
}

pairs() {  # pairs LIMIT_S A "VAR=VALUE..." B "VAR=VALUE..." BENCH_ARGS...: the bench under two
    # settings ("" for none), alternating A, B, A, B, one process each, so a drift of the run
    # shows in the pairs' spread (A1/, B1/, A2/, B2/ in the results)
    local limit=$1 a=$2 env_a=$3 b=$4 env_b=$5 run name env; shift 5
    for run in 1 2; do
        for name in "$a" "$b"; do
            env=$env_a; [[ $name == "$b" ]] && env=$env_b
            env $env timeout "$limit" $M "$@" --results "$work/$name$run" \
                --run-id "$name$run" > "$work/$name$run.txt" 2>&1
            stamp "$name $run" $?
        done
    done
}

# The issue's prefill table: Mixtral-8x7B at M 1024 / 4096, every scheme of its rows
PREFILL_TABLE=(bench --device cuda --mode graph --max-seconds 0.25 --repeats 15 --backend triton
               --model mixtral-8x7b --M 1024,4096 --scheme bf16 --scheme fp8-w8a8
               --scheme gptq-int4 --scheme awq-int4 --scheme mxfp4 --scheme nvfp4)

retune_w16() {  # retune_w16 BATCH: bf16's prefill entries (which the dispatch's W16 tile also
    # reads) on Mixtral-8x7B at M 1024 / 4096 and fp8-w8a8's at M 1024 tuned into a copy (cfg/
    # in the tar), 85 s a size; then the prefill table with the tree's files and the copy's
    batch_begin "$1" 570
    gpu_versions
    C=$work/cfg; cp -r kernels/triton_moe/configs "$C"
    tune_into "$C" w16 "190 --model mixtral-8x7b --scheme bf16 --M 1024,4096 --routings 2 --max-seconds 85" \
        "100 --model mixtral-8x7b --scheme fp8-w8a8 --M 1024 --routings 2 --max-seconds 85"
    pairs 45 tree "" tuned "MOECERT_TRITON_CONFIG_DIR=$C" "${PREFILL_TABLE[@]}"
    batch_end
}

tune_copy_compare() {  # tune_copy_compare BATCH TAG STEP...: (B, the bench's arguments, set by
    # the caller) the steps tuned into a copy of the tree's configs (cfg/ in the tar), then the
    # bench with the tree's files and with the copy, one process each
    local batch=$1 tag=$2; shift 2
    batch_begin "$batch" 565
    gpu_versions
    C=$work/cfg; cp -r kernels/triton_moe/configs "$C"
    tune_into "$C" "$tag" "$@"
    tree_and_copy "$C" "${B[@]}"
    batch_end
}

tune() {  # tune NAME STEP...: into the tree's own configs, h200.json copied to the results
    batch_begin "i44t-$1" 560; shift
    gpu_versions
    C=$PWD/kernels/triton_moe/configs
    local n=0 step
    for step in "$@"; do
        n=$((n + 1)); tune_into "$C" "$n" "$step"
        cp "$C/h200.json" "$work/h200.json"
    done
    batch_end
}

tune_nvfp4() {
    batch_begin i44n 570
    gpu_versions
    local step="255 --model mixtral-8x7b --model deepseek-v3 --scheme nvfp4"
    cp -r kernels/triton_moe/configs "$work/cfg-bytes"
    cp -r kernels/triton_moe/configs "$work/cfg-bf16"
    MOECERT_TRITON_FP4_SCALE_BF16=0 tune_into "$work/cfg-bytes" bytes "$step"
    MOECERT_TRITON_FP4_SCALE_BF16=1 tune_into "$work/cfg-bf16" bf16 "$step"
    batch_end
}

round7() {
    batch_begin i44r7 570
    gpu_versions
    for d in .bench/nvfp4-bytes .bench/nvfp4-bf16; do
        [ -f "$d/h200.json" ] || { echo "round7: $d/h200.json missing (tune-nvfp4's results)"; exit 2; }
    done
    B=(--device cuda --mode graph --max-seconds 0.5 --repeats 50)
    N=("${B[@]}" --M 16,64 --backend triton --scheme nvfp4
       --marlin-lib .vllm/_moe_C_stable_libtorch.abi3.so)
    MOECERT_TRITON_FP4_SCALE_BF16=0 timeout 60 $M bench "${N[@]}" --results "$work/n-base" \
        --run-id base > "$work/n-base.txt" 2>&1
    stamp n-base $?
    MOECERT_TRITON_FP4_SCALE_BF16=0 MOECERT_TRITON_CONFIG_DIR=$PWD/.bench/nvfp4-bytes \
        timeout 60 $M bench "${N[@]}" --results "$work/n-bytes" --run-id bytes \
        > "$work/n-bytes.txt" 2>&1
    stamp n-bytes $?
    MOECERT_TRITON_FP4_SCALE_BF16=1 MOECERT_TRITON_CONFIG_DIR=$PWD/.bench/nvfp4-bf16 \
        timeout 60 $M bench "${N[@]}" --results "$work/n-bf16" --run-id bf16 \
        > "$work/n-bf16.txt" 2>&1
    stamp n-bf16 $?
    P=("${B[@]}" --model mixtral-8x7b --M 1024,4096)
    timeout 90 $M bench "${P[@]}" --backend triton --scheme bf16 --scheme fp8-w8a8 \
        --scheme gptq-int4 --scheme mxfp4 --scheme nvfp4 --results "$work/p-triton" \
        --run-id prefill > "$work/p-triton.txt" 2>&1
    stamp p-triton $?
    timeout 60 $M bench "${P[@]}" --backend grouped --scheme mxfp4 --scheme nvfp4 \
        --results "$work/p-grouped" --run-id prefill-grouped > "$work/p-grouped.txt" 2>&1
    stamp p-grouped $?
    batch_end
}

tune_w4a8() {
    timeout 110 python -m pytest tests/kernels/test_int4_pairs.py -q -n 8 -p no:cacheprovider \
        -rfE > /tmp/i44-tests.txt 2>&1
    echo "tests exit $?: $(tail -n 1 /tmp/i44-tests.txt)"
    tune w4a8 "100 --model qwen3-30b-a3b --scheme w4a8-int8" \
        "260 --model mixtral-8x7b --scheme w4a8-int8" "120 --model deepseek-v3 --scheme w4a8-int8"
}

tune_fp() {
    tune fp "200 --model mixtral-8x7b --model deepseek-v3 --scheme mxfp4" \
        "140 --model qwen3-30b-a3b --model mixtral-8x7b --model deepseek-v3 --scheme mxfp8"
}

bench() {
    batch_begin i44b 560
    gpu_versions
    B=(--device cuda --mode graph --max-seconds 0.5 --repeats 50 --M 16,64
       --marlin-lib .vllm/_moe_C_stable_libtorch.abi3.so --backend triton)
    for scheme in ${I44_SCHEMES:-w4a8-int8 mxfp8 mxfp6-e2m3 mxfp4}; do B+=(--scheme "$scheme"); done
    MOECERT_TRITON_CONFIG_DIR=$PWD/.bench/base-configs timeout 110 $M bench "${B[@]}" \
        --results "$work/b-base" --run-id base > "$work/b-base.txt" 2>&1
    stamp bench-base $?
    timeout 110 $M bench "${B[@]}" --results "$work/b-cand" --run-id cand > "$work/b-cand.txt" 2>&1
    stamp bench-cand $?
    $M report "$work/b-cand" --baseline "$work/b-base" --md "$work/cand-vs-base.md" \
        > /dev/null 2>&1
    s=$(date +%s)
    timeout 250 $M run --suite ci --device cuda -n auto --results "$work/ci" > "$work/ci.txt" 2>&1
    stamp "ci ($(( $(date +%s) - s )) s)" $?
    batch_end
}

int4_lookup() {  # 72fc57e's int4 lookup against round six's, prefill and M 256 (~150 s)
    batch_begin i44l 560
    gpu_versions
    [ -d .bench/before/kernels ] || { echo "int4-lookup: .bench/before missing (git archive 4667f99 reference kernels conformance reports | tar -x -C .bench/before; carry it)"; exit 2; }
    tree_shim .bench/before
    L=(bench --device cuda --mode graph --max-seconds 0.5 --repeats 30 --backend triton
       --scheme gptq-int4 --model mixtral-8x7b --model deepseek-v3 --M 256,1024,4096)
    PYTHONPATH=/tmp/shim-before timeout 110 python -m moecert.conformance.cli "${L[@]}" \
        --results "$work/l-before" --run-id before > "$work/l-before.txt" 2>&1
    stamp l-before $?
    timeout 110 $M "${L[@]}" --results "$work/l-after" --run-id after > "$work/l-after.txt" 2>&1
    stamp l-after $?
    grep -h graph "$work"/l-*.txt >> "$work/times.txt"
    batch_end
}

stages_awq() {  # where gpt-oss's time goes, the peer with its routing, then tune-awq (~520 s)
    batch_begin i44s 570
    gpu_versions
    for m in 16 64; do
        timeout 60 python tools/layer_stages.py --model gpt-oss-120b --scheme mxfp4 --M $m \
            > "$work/stages-$m.txt" 2>&1
        stamp "stages M$m" $?
    done
    PYTHONPATH=.vllm/tk:$PYTHONPATH timeout 50 python tools/ogs_peer.py --M 16,64 \
        > "$work/ogs.txt" 2>&1
    stamp ogs $?
    C=$PWD/kernels/triton_moe/configs
    tune_into "$C" awq "150 --model qwen3-30b-a3b --model mixtral-8x7b --scheme awq-int4" \
        "170 --model deepseek-v3 --scheme awq-int4"
    cp "$C/h200.json" "$work/h200.json"
    batch_end
}

table_rows() {  # table_rows FP4_S OTHER_S: the decode table's rows, the peers beside them
    # (FP4 with Marlin FP4, matmul_ogs on the bench's routings, then W4A8 / MXFP6 / MXFP8 / AWQ
    # / gptq-int4 with Marlin int4 beside gptq), each step's limit given
    B=(--device cuda --mode graph --max-seconds 0.5 --repeats 50 --M 16,64 --backend triton
       --marlin-lib .vllm/_moe_C_stable_libtorch.abi3.so)
    timeout "$1" $M bench "${B[@]}" --scheme mxfp4 --scheme nvfp4 --results "$work/fp4" \
        --run-id fp4 > "$work/fp4.txt" 2>&1
    stamp fp4 $?
    PYTHONPATH=.vllm/tk:$PYTHONPATH timeout 40 python tools/ogs_peer.py --M 16,64 \
        > "$work/ogs.txt" 2>&1
    stamp ogs $?
    timeout "$2" $M bench "${B[@]}" --scheme w4a8-int8 --scheme mxfp6-e2m3 --scheme mxfp8 \
        --scheme awq-int4 --scheme gptq-int4 --results "$work/other" --run-id other \
        > "$work/other.txt" 2>&1
    stamp other $?
}
table() {  # the issue's decode table from one call, the peers beside it; AWQ's files before (~540 s)
    batch_begin i44table 575
    gpu_versions
    table_rows 160 280
    MOECERT_TRITON_CONFIG_DIR=$PWD/.bench/base-configs timeout 70 $M bench "${B[@]}" \
        --scheme awq-int4 --results "$work/awq-base" --run-id awq-base > "$work/awq-base.txt" 2>&1
    stamp awq-base $?
    batch_end
}

awq_m1() {  # AWQ's decode bucket of M 1 on Qwen3 / DeepSeek-V3 (W_INT4 had one, its own key not),
    # then awq-int4 at M 1 / 16 / 64 against .bench/base-configs (its W_INT4 entries) (~250 s)
    batch_begin i44m1 560
    gpu_versions
    C=$PWD/kernels/triton_moe/configs
    tune_into "$C" awq1 "150 --model qwen3-30b-a3b --model deepseek-v3 --scheme awq-int4 --M 1"
    cp "$C/h200.json" "$work/h200.json"
    B=(--device cuda --mode graph --max-seconds 0.5 --repeats 50 --M 1,16,64 --backend triton
       --scheme awq-int4)
    timeout 100 $M bench "${B[@]}" --results "$work/awq-tree" --run-id awq-tree \
        > "$work/awq-tree.txt" 2>&1
    stamp awq-tree $?
    MOECERT_TRITON_CONFIG_DIR=$PWD/.bench/base-configs timeout 100 $M bench "${B[@]}" \
        --results "$work/awq-base" --run-id awq-base > "$work/awq-base.txt" 2>&1
    stamp awq-base $?
    batch_end
}

peer_routing() {  # gpt-oss MXFP4 against matmul_ogs on the bench's own routings (~120 s)
    batch_begin i44p 400
    gpu_versions
    timeout 90 $M bench --device cuda --mode graph --max-seconds 0.5 --repeats 50 --M 16,64 \
        --backend triton --scheme mxfp4 --model gpt-oss-120b --results "$work/oss" \
        --run-id oss > "$work/oss.txt" 2>&1
    stamp oss $?
    PYTHONPATH=.vllm/tk:$PYTHONPATH timeout 60 python tools/ogs_peer.py --M 16,64 \
        > "$work/ogs.txt" 2>&1
    stamp ogs $?
    batch_end
}

w4a8_m64() {  # W4A8 Mixtral-8x7B's M 64 bucket with a bounded search, then M 16 / 64 against
    # .bench/base-configs (~210 s; the budget's last call of 2026-12-01)
    batch_begin i44w64 250
    gpu_versions
    C=$PWD/kernels/triton_moe/configs
    tune_into "$C" w64 "150 --model mixtral-8x7b --scheme w4a8-int8 --M 64 --max-seconds 80"
    cp "$C/h200.json" "$work/h200.json"
    B=(--device cuda --mode graph --max-seconds 0.5 --repeats 50 --M 16,64 --backend triton
       --scheme w4a8-int8 --model mixtral-8x7b)
    timeout 40 $M bench "${B[@]}" --results "$work/tree" --run-id tree > "$work/tree.txt" 2>&1
    stamp tree $?
    MOECERT_TRITON_CONFIG_DIR=$PWD/.bench/base-configs timeout 40 $M bench "${B[@]}" \
        --results "$work/base" --run-id base > "$work/base.txt" 2>&1
    stamp base $?
    batch_end
}

prefill() {  # round nine: bf16 and fp8-w8a8 on Mixtral-8x7B tuned at prefill sizes (neither had
    # an entry: the heuristics' prefill tile; the FP4 prefill dispatch runs the W16 tile, so
    # reads bf16's), then prefill against .bench/base-configs, then where M 4096's time goes
    batch_begin i44pf 575
    gpu_versions
    C=$PWD/kernels/triton_moe/configs
    local T="--model mixtral-8x7b --M 1024,4096 --routings 2 --max-seconds 70"
    tune_into "$C" pf "185 $T --scheme bf16" "185 $T --scheme fp8-w8a8"
    cp "$C/h200.json" "$work/h200.json"
    P=(--device cuda --mode graph --max-seconds 0.5 --repeats 30 --backend triton
       --model mixtral-8x7b --M 1024,4096 --scheme bf16 --scheme fp8-w8a8 --scheme mxfp4
       --scheme nvfp4)
    timeout 70 $M bench "${P[@]}" --results "$work/p-tree" --run-id tree > "$work/p-tree.txt" 2>&1
    stamp p-tree $?
    MOECERT_TRITON_CONFIG_DIR=$PWD/.bench/base-configs timeout 70 $M bench "${P[@]}" \
        --results "$work/p-base" --run-id base > "$work/p-base.txt" 2>&1
    stamp p-base $?
    timeout 40 python tools/layer_stages.py --model mixtral-8x7b --scheme bf16 --M 4096 \
        > "$work/stages-bf16-4096.txt" 2>&1
    stamp "stages bf16 M4096" $?
    batch_end
}

swap() {  # round nine: the nibble schemes' prefill tiles with the weights as the MMA's first
    # operand (prefill_sweep --set swapped; never timed), then the W16 / fp8 prefill tile
    # candidates on the two other layers (the default against Mixtral's tuned shapes) (~400 s)
    batch_begin i44sw 575
    gpu_versions
    timeout 260 python tools/prefill_sweep.py --model mixtral-8x7b --scheme gptq-int4 \
        --scheme mxfp4 --scheme nvfp4 --M 1024,4096 --set swapped > "$work/swapped.txt" 2>&1
    stamp swapped $?
    timeout 150 python tools/prefill_sweep.py --model deepseek-v3 --model qwen3-30b-a3b \
        --scheme bf16 --scheme fp8-w8a8 --M 4096 --candidates 1,3,5 > "$work/plain.txt" 2>&1
    stamp plain $?
    batch_end
}

round9() {  # round nine's heuristics (prefill tiles by operand width, the swapped nibble tile,
    # DEQUANT_ROWS 512) against the tree before them (.bench/before, carried), one process each,
    # per layer; then the FP4 dispatch forced at M 2048 (~450 s)
    batch_begin i44r9 575
    gpu_versions
    [ -d .bench/before/kernels ] || { echo "round9: .bench/before missing (git archive of the tree before | tar -x -C .bench/before; carry it)"; exit 2; }
    tree_shim .bench/before
    B=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 20 --backend triton)
    local groups=(
        "mix --model mixtral-8x7b --M 1024,2048,4096 --scheme gptq-int4 --scheme awq-int4 --scheme mxfp4 --scheme nvfp4"
        "qwen --model qwen3-30b-a3b --M 1024,4096 --scheme gptq-int4 --scheme bf16 --scheme fp8-w8a8 --scheme mxfp4"
        "ds --model deepseek-v3 --M 4096 --scheme gptq-int4 --scheme bf16 --scheme fp8-w8a8 --scheme mxfp4"
        "oss --model gpt-oss-120b --M 4096 --scheme mxfp4")
    local g name
    for g in "${groups[@]}"; do
        read -r -a a <<< "$g"; name=${a[0]}
        timeout 110 $M "${B[@]}" "${a[@]:1}" --results "$work/$name-tree" --run-id tree \
            > "$work/$name-tree.txt" 2>&1
        stamp "$name-tree" $?
        PYTHONPATH=/tmp/shim-before timeout 110 python -m moecert.conformance.cli "${B[@]}" \
            "${a[@]:1}" --results "$work/$name-before" --run-id before > "$work/$name-before.txt" 2>&1
        stamp "$name-before" $?
    done
    MOECERT_TRITON_DEQUANT_ROWS=128 timeout 60 $M "${B[@]}" --model mixtral-8x7b --M 2048 \
        --scheme mxfp4 --scheme nvfp4 --results "$work/dense" --run-id dense > "$work/dense.txt" 2>&1
    stamp dense-2048 $?
    grep -h "/graph" "$work"/*.txt > "$work/rows.txt"
    batch_end
}

verify() {  # tools/gpu_ci.sh on the tree (suite cut at 200 s), the swapped default tile checked
    # against the decode tile at model size where prefill_sweep had not (AWQ, gpt-oss), then
    # the prefill table (Mixtral-8x7B, triton and the grouped peer) (~480 s)
    GPU_CI_SUITE_S=200 timeout 400 bash tools/gpu_ci.sh > "${OUT:-/tmp/out}/gpu-ci.txt" 2>&1
    echo "gpu_ci exit $?"
    batch_begin i44v 170
    gpu_versions
    timeout 40 python tools/prefill_sweep.py --model mixtral-8x7b --scheme awq-int4 --M 1024 \
        --set swapped --candidates 0 > "$work/check-awq.txt" 2>&1
    stamp check-awq $?
    timeout 40 python tools/prefill_sweep.py --model gpt-oss-120b --scheme mxfp4 --M 4096 \
        --set swapped --candidates 0 > "$work/check-oss.txt" 2>&1
    stamp check-oss $?
    P=(--device cuda --mode graph --max-seconds 0.5 --repeats 30 --model mixtral-8x7b
       --M 1024,4096)
    timeout 60 $M bench "${P[@]}" --backend triton --scheme bf16 --scheme fp8-w8a8 \
        --scheme gptq-int4 --scheme awq-int4 --scheme mxfp4 --scheme nvfp4 \
        --results "$work/p-triton" --run-id prefill > "$work/p-triton.txt" 2>&1
    stamp p-triton $?
    timeout 40 $M bench "${P[@]}" --backend grouped --scheme mxfp4 --scheme nvfp4 \
        --results "$work/p-grouped" --run-id grouped > "$work/p-grouped.txt" 2>&1
    stamp p-grouped $?
    batch_end
}

tune_prefill() {  # the prefill CUDA test and the FP8 folders (cut in `verify`), then gptq-int4 on
    # Mixtral-8x7B at M 1024 / 4096 and mxfp4 at M 1024 (the fused path) tuned into the tree's
    # configs, benched against the configs before (~470 s)
    batch_begin i44tp 575
    gpu_versions
    timeout 100 python -m pytest tests/kernels/test_fp4_prefill_cuda.py -q -p no:cacheprovider \
        -rfE > "$work/prefill-cuda.txt" 2>&1
    stamp "prefill cuda test: $(tail -n 1 "$work/prefill-cuda.txt")" $?
    fp8_folders 70
    C=$PWD/kernels/triton_moe/configs
    cp -r "$C" "$work/cfg-before"
    tune_into "$C" tp "150 --model mixtral-8x7b --scheme gptq-int4 --M 1024,4096 --routings 2 --max-seconds 50" \
        "85 --model mixtral-8x7b --scheme mxfp4 --M 1024 --routings 2 --max-seconds 50"
    cp "$C/h200.json" "$work/h200.json"
    P=(bench --device cuda --mode graph --max-seconds 0.5 --repeats 30 --backend triton
       --model mixtral-8x7b --M 1024,4096 --scheme gptq-int4 --scheme mxfp4)
    timeout 40 $M "${P[@]}" --results "$work/tuned" --run-id tuned > "$work/tuned.txt" 2>&1
    stamp tuned $?
    MOECERT_TRITON_CONFIG_DIR=$work/cfg-before timeout 40 $M "${P[@]}" --results "$work/before" \
        --run-id before > "$work/before.txt" 2>&1
    stamp before $?
    batch_end
}

edges() {  # round nine's heuristics at the sizes between decode and the timed prefill rows
    # (64-128 rows per expert, and Mixtral M 2048 on the 8192-row gptq bucket), the tree
    # against .bench/before (carried), one process each (~90 s)
    batch_begin i44e 200
    gpu_versions
    tree_shim .bench/before
    B=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 20 --backend triton)
    local a=(--model mixtral-8x7b --M 256,512,2048 --scheme gptq-int4 --scheme awq-int4
             --scheme mxfp4 --scheme nvfp4)
    local o=(--model gpt-oss-120b --M 1024,2048 --scheme mxfp4)
    timeout 60 $M "${B[@]}" "${a[@]}" --results "$work/mix-tree" --run-id tree > "$work/mix-tree.txt" 2>&1
    stamp mix-tree $?
    PYTHONPATH=/tmp/shim-before timeout 60 python -m moecert.conformance.cli "${B[@]}" "${a[@]}" \
        --results "$work/mix-before" --run-id before > "$work/mix-before.txt" 2>&1
    stamp mix-before $?
    timeout 30 $M "${B[@]}" "${o[@]}" --results "$work/oss-tree" --run-id tree > "$work/oss-tree.txt" 2>&1
    stamp oss-tree $?
    PYTHONPATH=/tmp/shim-before timeout 30 python -m moecert.conformance.cli "${B[@]}" "${o[@]}" \
        --results "$work/oss-before" --run-id before > "$work/oss-before.txt" 2>&1
    stamp oss-before $?
    batch_end
}

decode_check() {  # decode rows of the layers whose files gained prefill buckets this round,
    # the tree against the session's start (.bench/start, carried), one process each (~60 s)
    batch_begin i44d 150
    gpu_versions
    tree_shim .bench/start
    B=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 30 --backend triton
       --model mixtral-8x7b --M 1,16,64 --scheme bf16 --scheme fp8-w8a8 --scheme gptq-int4)
    timeout 50 $M "${B[@]}" --results "$work/tree" --run-id tree > "$work/tree.txt" 2>&1
    stamp tree $?
    PYTHONPATH=/tmp/shim-start timeout 50 python -m moecert.conformance.cli "${B[@]}" \
        --results "$work/start" --run-id start > "$work/start.txt" 2>&1
    stamp start $?
    batch_end
}

fused() {  # round ten: the activation in GEMM1's epilogue (MOECERT_TRITON_FUSED_ACT) against
    # the activation kernel, the same tree, one process each: its CUDA test first, then
    # prefill on Mixtral-8x7B, decode on three layers, and where bf16 M 4096 goes (~330 s)
    batch_begin i44f 575
    gpu_versions
    timeout 120 python -m pytest tests/kernels/test_fused_activation_cuda.py -q \
        -p no:cacheprovider -rfE > "$work/fused-cuda.txt" 2>&1
    stamp "fused cuda test: $(tail -n 1 "$work/fused-cuda.txt")" $?
    P=(bench --device cuda --mode graph --max-seconds 0.5 --repeats 30 --backend triton
       --model mixtral-8x7b --M 1024,4096 --scheme bf16 --scheme fp8-w8a8 --scheme gptq-int4
       --scheme awq-int4 --scheme mxfp4 --scheme nvfp4)
    D=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 30 --backend triton
       --model mixtral-8x7b --model qwen3-30b-a3b --model gpt-oss-120b --M 16,64
       --scheme bf16 --scheme gptq-int4 --scheme mxfp4 --scheme nvfp4)
    local f n=0
    for f in 0 halves adjacent 0; do  # the unfused process again last: the run's drift
        n=$((n + 1))
        MOECERT_TRITON_FUSED_ACT=$f timeout 80 $M "${P[@]}" --results "$work/p$n-$f" \
            --run-id "prefill$n-fused-$f" > "$work/p$n-$f.txt" 2>&1
        stamp "prefill fused=$f" $?
    done
    for f in 0 halves adjacent; do
        MOECERT_TRITON_FUSED_ACT=$f timeout 70 $M "${D[@]}" --results "$work/d-$f" \
            --run-id "decode-fused-$f" > "$work/d-$f.txt" 2>&1
        stamp "decode fused=$f" $?
    done
    timeout 40 python tools/layer_stages.py --model mixtral-8x7b --scheme bf16 --M 4096 \
        > "$work/stages-bf16-4096.txt" 2>&1
    stamp stages $?
    batch_end
}

fused_verify() {  # round ten after the FUSED_ACT opt-outs: the FP8 folders (gpu_ci.sh's last
    # steps, cut in its own call), then the prefill table with the activation kernel and
    # with the tree's default, and the grouped peer, one process each (~300 s)
    batch_begin i44fv 575
    gpu_versions
    fp8_folders 90
    P=(bench --device cuda --mode graph --max-seconds 0.5 --repeats 30 --model mixtral-8x7b
       --M 1024,4096)
    local f
    for f in 0 1; do
        MOECERT_TRITON_FUSED_ACT=$f timeout 80 $M "${P[@]}" --backend triton --scheme bf16 \
            --scheme fp8-w8a8 --scheme gptq-int4 --scheme awq-int4 --scheme mxfp4 \
            --scheme nvfp4 --results "$work/p-$f" --run-id "prefill-fused-$f" \
            > "$work/p-$f.txt" 2>&1
        stamp "prefill fused=$f" $?
    done
    timeout 60 $M "${P[@]}" --backend grouped --scheme mxfp4 --scheme nvfp4 \
        --results "$work/p-grouped" --run-id grouped > "$work/p-grouped.txt" 2>&1
    stamp p-grouped $?
    batch_end
}

tune_m64() {  # round ten: W4A8 and AWQ on Mixtral-8x7B at M 64 (31 / 48% of the floor, their
    # earlier searches cut before the tuner timed every start first) into a copy of the
    # tree's configs (back in the tar as cfg/), then M 16 / 64 with the tree's files and with
    # the copy, one process each (~470 s)
    B=(bench --device cuda --mode graph --max-seconds 0.5 --repeats 50 --M 16,64 --backend triton
       --scheme w4a8-int8 --scheme awq-int4 --model mixtral-8x7b)
    tune_copy_compare i44m64 m64 "170 --model mixtral-8x7b --scheme w4a8-int8 --M 64 --max-seconds 110" \
        "170 --model mixtral-8x7b --scheme awq-int4 --M 64 --max-seconds 110"
}

m64_edges() {  # the sizes tune-m64's new entries also answer (W4A8 Mixtral M 32-4096, AWQ M 32 /
    # 128), against the configs before them (.bench/m64-before, carried), one process each (~100 s)
    batch_begin i44me 200
    gpu_versions
    B=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 30 --backend triton
       --model mixtral-8x7b --M "${I44_M:-32,128,1024}" --scheme "${I44_SCHEME:-w4a8-int8}"
       --scheme awq-int4)
    timeout 60 $M "${B[@]}" --results "$work/tree" --run-id tree > "$work/tree.txt" 2>&1
    stamp tree $?
    MOECERT_TRITON_CONFIG_DIR=$PWD/.bench/m64-before timeout 60 $M "${B[@]}" \
        --results "$work/before" --run-id before > "$work/before.txt" 2>&1
    stamp before $?
    batch_end
}

tune_fused() {  # the tuner's FUSED_ACT choice on a GPU: fp8-w8a8 Mixtral-8x7B at M 4096 and
    # mxfp4 at M 1024 (where the bench timed the fused epilogue slower) and bf16 at M 4096
    # (faster), cut searches into a copy of the configs; prints each entry's FUSED_ACT (~230 s)
    batch_begin i44tf 300
    gpu_versions
    C=$work/cfg; cp -r kernels/triton_moe/configs "$C"
    tune_into "$C" tf "80 --model mixtral-8x7b --scheme fp8-w8a8 --M 4096 --routings 1 --max-seconds 30" \
        "70 --model mixtral-8x7b --scheme mxfp4 --M 1024 --routings 1 --max-seconds 25" \
        "80 --model mixtral-8x7b --scheme bf16 --M 4096 --routings 1 --max-seconds 30"
    python - "$C/h200.json" > "$work/fused-act.txt" 2>&1 <<'PY'
import json, sys
for layer in json.load(open(sys.argv[1]))["layers"]:
    if layer["experts"] == 8 and layer["gemm1"] == [28672, 4096]:
        for bucket, entry in layer["buckets"].items():
            print(layer["weight"], layer["act"], bucket, "FUSED_ACT", entry["gemm1"].get("FUSED_ACT"))
PY
    stamp fused-act $?
    batch_end
}

r11() {  # round eleven: SCALE_COLS + E8M0_NORMAL (gemm_kernel) against the tree before them
    # (.bench/r11-base, carried), decode of the schemes whose K loop divided by the scale block,
    # one process each; then fp8-w8a8 Mixtral M 4096 fused everywhere (SCALE_RUNS, first run on
    # a GPU by gpu_ci on f9aeeee) against the tree's FUSED_ACT false, after the `ci` suite on
    # cuda with the tree (verdicts) (~500 s)
    batch_begin i44r11 580
    gpu_versions
    [ -d .bench/r11-base/kernels ] || { echo "r11: .bench/r11-base missing (git archive f9aeeee reference kernels conformance reports | tar -x -C .bench/r11-base; carry it)"; exit 2; }
    tree_shim .bench/r11-base
    B=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 30 --backend triton --M 16,64
       --scheme mxfp8 --scheme mxfp6-e2m3 --scheme gptq-int4 --scheme w4a8-int8 --scheme fp8-w8a8)
    timeout 170 $M "${B[@]}" --results "$work/r11" --run-id r11 > "$work/r11.txt" 2>&1
    stamp r11 $?
    PYTHONPATH=/tmp/shim-r11-base timeout 170 python -m moecert.conformance.cli "${B[@]}" \
        --results "$work/base" --run-id base > "$work/base.txt" 2>&1
    stamp base $?
    timeout 120 $M run --suite ci --device cuda -n auto --results "$work/ci" > "$work/ci.txt" 2>&1
    stamp "ci suite: $(grep -E '^(green|not green)' "$work/ci.txt" | tail -1)" $?
    C=$work/cfg-all-fused; cp -r kernels/triton_moe/configs "$C"
    sed -i 's/"FUSED_ACT": false/"FUSED_ACT": true/' "$C"/*.json
    F=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 20 --backend triton
       --scheme fp8-w8a8 --model mixtral-8x7b --M 4096)
    timeout 60 $M "${F[@]}" --results "$work/f8-tree" --run-id tree > "$work/f8-tree.txt" 2>&1
    stamp f8-tree $?
    MOECERT_TRITON_CONFIG_DIR=$C timeout 60 $M "${F[@]}" --results "$work/f8-fused" \
        --run-id all-fused > "$work/f8-fused.txt" 2>&1
    stamp f8-fused $?
    batch_end
}
r11b() {  # round eleven, second call: Mixtral-8x7B MXFP8 at M 64 ran 5% slower with the
    # constants (r11) while every other MXFP8 row ran faster: the tree and .bench/r11-base
    # twice each (noise), and the tree with MXFP8 re-tuned at M 64 into a copy (cfg/ in the
    # tar), one process each (~230 s)
    batch_begin i44r11b 420
    gpu_versions
    [ -d .bench/r11-base/kernels ] || { echo "r11b: .bench/r11-base missing (carry it)"; exit 2; }
    tree_shim .bench/r11-base
    C=$work/cfg; cp -r kernels/triton_moe/configs "$C"
    B=(bench --device cuda --mode graph --max-seconds 0.5 --repeats 50 --M 16,64 --backend triton
       --scheme mxfp8 --model mixtral-8x7b)
    local n
    for n in 1 2; do
        timeout 50 $M "${B[@]}" --results "$work/tree$n" --run-id "tree$n" > "$work/tree$n.txt" 2>&1
        stamp "tree$n" $?
        PYTHONPATH=/tmp/shim-r11-base timeout 50 python -m moecert.conformance.cli "${B[@]}" \
            --results "$work/base$n" --run-id "base$n" > "$work/base$n.txt" 2>&1
        stamp "base$n" $?
        [ $n = 1 ] && tune_into "$C" mx8 "150 --model mixtral-8x7b --scheme mxfp8 --M 64 --max-seconds 100"
    done
    MOECERT_TRITON_CONFIG_DIR=$C timeout 50 $M "${B[@]}" --results "$work/tuned" \
        --run-id tuned > "$work/tuned.txt" 2>&1
    stamp tuned $?
    batch_end
}
table_r11() {  # the decode table from one call with the peers (`table` without AWQ's files
    # before), its watchdog early enough for a call of ~360 s (~230 s)
    batch_begin i44table 300
    gpu_versions
    table_rows 110 150
    batch_end
}
fp8_fused() {  # after SCALE_RUNS (written without a GPU): its CUDA test, then fp8-w8a8 with the
    # activation kernel, fused by the tree's entries, and fused everywhere (the M 4096
    # entry's FUSED_ACT false overridden by a copy of the configs without it), decode and
    # prefill on Mixtral-8x7B and DeepSeek-V3, one process each (~300 s)
    batch_begin i44f8 560
    gpu_versions
    timeout 150 python -m pytest tests/kernels/test_fused_activation_cuda.py -q \
        -p no:cacheprovider -rfE > "$work/fused-cuda.txt" 2>&1
    stamp "fused cuda test: $(tail -n 1 "$work/fused-cuda.txt")" $?
    C=$work/cfg-all-fused; cp -r kernels/triton_moe/configs "$C"
    sed -i 's/"FUSED_ACT": false/"FUSED_ACT": true/' "$C"/*.json
    B=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 30 --backend triton
       --scheme fp8-w8a8 --model mixtral-8x7b --model deepseek-v3 --M 16,64,1024,4096)
    MOECERT_TRITON_FUSED_ACT=0 timeout 120 $M "${B[@]}" --results "$work/unfused" \
        --run-id unfused > "$work/unfused.txt" 2>&1
    stamp unfused $?
    timeout 120 $M "${B[@]}" --results "$work/tree" --run-id tree > "$work/tree.txt" 2>&1
    stamp tree $?
    MOECERT_TRITON_CONFIG_DIR=$C timeout 120 $M "${B[@]}" --results "$work/all-fused" \
        --run-id all-fused > "$work/all-fused.txt" 2>&1
    stamp all-fused $?
    batch_end
}

r12() {  # round twelve: no 8-bit tensor on the way to a 16-bit dot (AWQ's zero points in
    # int16, W4A8's codes in the compute dtype) and W4A8's swapped prefill tile, against the
    # tree before (.bench/r12-base = git archive 977fde3, carried): the two CUDA test files of
    # the decodes it touches first, then decode of awq-int4 / w4a8-int8 / gptq-int4 (the
    # control: unchanged) on the three layers, and W4A8 / AWQ prefill on Mixtral-8x7B, one
    # process each, the tree first (~420 s)
    batch_begin i44r12 570
    gpu_versions
    [ -d .bench/r12-base/kernels ] || { echo "r12: .bench/r12-base missing (git archive 977fde3 reference kernels conformance reports | tar -x -C .bench/r12-base; carry it)"; exit 2; }
    tree_shim .bench/r12-base
    local f
    for f in tests/kernels/test_int4_pairs.py tests/kernels/test_fp4_planes.py; do
        timeout 100 python -m pytest "$f" -q -p no:cacheprovider -rfE > "$work/$(basename "$f" .py).txt" 2>&1
        stamp "$(basename "$f"): $(tail -n 1 "$work/$(basename "$f" .py).txt")" $?
    done
    B=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 30 --backend triton --M 16,64
       --scheme awq-int4 --scheme w4a8-int8 --scheme gptq-int4)
    timeout 110 $M "${B[@]}" --results "$work/r12" --run-id r12 > "$work/r12.txt" 2>&1
    stamp r12 $?
    PYTHONPATH=/tmp/shim-r12-base timeout 110 python -m moecert.conformance.cli "${B[@]}" \
        --results "$work/base" --run-id base > "$work/base.txt" 2>&1
    stamp base $?
    P=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 20 --backend triton
       --scheme w4a8-int8 --scheme awq-int4 --model mixtral-8x7b --M 1024,4096)
    timeout 70 $M "${P[@]}" --results "$work/p-r12" --run-id p-r12 > "$work/p-r12.txt" 2>&1
    stamp p-r12 $?
    PYTHONPATH=/tmp/shim-r12-base timeout 70 python -m moecert.conformance.cli "${P[@]}" \
        --results "$work/p-base" --run-id p-base > "$work/p-base.txt" 2>&1
    stamp p-base $?
    batch_end
}

r13() {  # round thirteen: ZERO_SUMS (written without a GPU) against MOECERT_TRITON_ZERO_SUMS=0
    # in the same tree: the CUDA tests first, then decode and prefill, one process each
    batch_begin i44r13 570
    gpu_versions
    local f
    for f in tests/kernels/test_zero_sums_cuda.py tests/kernels/test_fp4_planes.py \
             tests/kernels/test_int4_pairs.py; do
        timeout 120 python -m pytest "$f" -q -p no:cacheprovider -rfE > "$work/$(basename "$f" .py).txt" 2>&1
        stamp "$(basename "$f"): $(tail -n 1 "$work/$(basename "$f" .py).txt")" $?
    done
    B=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 30 --backend triton --M 16,64)
    timeout 100 $M "${B[@]}" --scheme awq-int4 --scheme gptq-int4 --results "$work/sums" \
        --run-id sums > "$work/sums.txt" 2>&1
    stamp sums $?
    MOECERT_TRITON_ZERO_SUMS=0 timeout 70 $M "${B[@]}" --scheme awq-int4 --results "$work/decode" \
        --run-id decode > "$work/decode.txt" 2>&1
    stamp decode $?
    timeout 70 $M "${B[@]}" --scheme awq-int4 --results "$work/sums2" --run-id sums2 \
        > "$work/sums2.txt" 2>&1
    stamp sums2 $?
    P=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 20 --backend triton
       --scheme awq-int4 --model mixtral-8x7b --M 1024,4096)
    timeout 50 $M "${P[@]}" --results "$work/p-sums" --run-id p-sums > "$work/p-sums.txt" 2>&1
    stamp p-sums $?
    MOECERT_TRITON_ZERO_SUMS=0 timeout 50 $M "${P[@]}" --results "$work/p-decode" \
        --run-id p-decode > "$work/p-decode.txt" 2>&1
    stamp p-decode $?
    batch_end
}

table_r13() {  # round thirteen's correctness on cuda beside gpu_ci (the ci suite's small AWQ
    # layers are stored in planes only when forced), then the issue's table
    batch_begin i44table13 540
    gpu_versions
    timeout 100 python -m pytest tests/kernels/test_zero_sums_cuda.py -q -p no:cacheprovider \
        -rfE > "$work/zero-sums-cuda.txt" 2>&1
    stamp "zero sums cuda test: $(tail -n 1 "$work/zero-sums-cuda.txt")" $?
    MOECERT_TRITON_NIB_SPAN=128 timeout 120 $M run --suite ci --device cuda --backend triton \
        --scheme awq-int4 -n auto --results "$work/ci-awq-planes" > "$work/ci-awq-planes.txt" 2>&1
    stamp "ci awq planes: $(grep -E '^(green|not green)' "$work/ci-awq-planes.txt" | tail -1)" $?
    table_rows 110 150
    # the lookups r13-tune's entries moved and no bench timed (tools/lookup_snapshot.py):
    # Mixtral AWQ at M 1 / 8 / 32 / 128, DeepSeek-V3 W4A8 at M 1 / 4, against the files before
    # them (.bench/r13-before, carried), one process each
    local E=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 30 --backend triton)
    timeout 40 $M "${E[@]}" --model mixtral-8x7b --scheme awq-int4 --M 1,8,32,128 \
        --results "$work/e-tree" --run-id e-tree > "$work/e-tree.txt" 2>&1
    stamp e-tree $?
    MOECERT_TRITON_CONFIG_DIR=$PWD/.bench/r13-before timeout 40 $M "${E[@]}" --model mixtral-8x7b \
        --scheme awq-int4 --M 1,8,32,128 --results "$work/e-before" --run-id e-before \
        > "$work/e-before.txt" 2>&1
    stamp e-before $?
    timeout 40 $M "${E[@]}" --model deepseek-v3 --scheme w4a8-int8 --M 1,4 \
        --results "$work/d-tree" --run-id d-tree > "$work/d-tree.txt" 2>&1
    stamp d-tree $?
    MOECERT_TRITON_CONFIG_DIR=$PWD/.bench/r13-before timeout 40 $M "${E[@]}" --model deepseek-v3 \
        --scheme w4a8-int8 --M 1,4 --results "$work/d-before" --run-id d-before \
        > "$work/d-before.txt" 2>&1
    stamp d-before $?
    batch_end
}

r13_tune() {  # round thirteen, second call: the tuner chooses ZERO_SUMS per GEMM and bucket
    # (r13 timed the sums slower on Qwen3 and Mixtral M 64 with the old tiles, faster on
    # DeepSeek-V3 and Mixtral M 16); W4A8 on DeepSeek-V3 re-tuned; into a copy (cfg/ in the
    # tar), then the tree's files against the copy, one process each
    B=(bench --device cuda --mode graph --max-seconds 0.5 --repeats 50 --M 16,64 --backend triton
       --scheme awq-int4 --scheme w4a8-int8)
    tune_copy_compare i44r13t r13 "90 --model qwen3-30b-a3b --scheme awq-int4 --max-seconds 30" \
        "150 --model mixtral-8x7b --scheme awq-int4 --max-seconds 55" \
        "190 --model deepseek-v3 --scheme w4a8-int8 --max-seconds 60"
}

r12_tune() {  # round twelve, second call: W4A8's entries were tuned on the 8-bit operand
    # layout (its swapped tiles 404 SASS a step, unswapped 470; now 366 / 344): re-tuned at
    # M 16 / 64 on Qwen3-30B-A3B and Mixtral-8x7B into a copy (cfg/ in the tar), then the tree's
    # files against the copy, one process each (~420 s)
    B=(bench --device cuda --mode graph --max-seconds 0.5 --repeats 50 --M 16,64 --backend triton
       --scheme w4a8-int8 --model qwen3-30b-a3b --model mixtral-8x7b)
    tune_copy_compare i44r12t w4a8 "140 --model qwen3-30b-a3b --scheme w4a8-int8 --max-seconds 50" \
        "220 --model mixtral-8x7b --scheme w4a8-int8 --max-seconds 80"
}

r12_words() {  # round twelve, third call: MXFP8's weights as 16-bit words (E4M3_WORDS, written
    # without a GPU): its CUDA test, then MXFP8 / MXFP6 decode with the words and with the fp8
    # bytes (MOECERT_TRITON_E4M3_WORDS=0), one process each, bytes first and again last; then
    # W4A8's re-tuned entries at the other sizes whose lookups moved, against the files before
    # them (.bench/r12t-before, carried) (~380 s)
    batch_begin i44r12w 565
    gpu_versions
    [ -f .bench/r12t-before/h200.json ] || { echo "r12-words: .bench/r12t-before missing (carry it)"; exit 2; }
    timeout 150 python -m pytest tests/kernels/test_e4m3_words_cuda.py -q -p no:cacheprovider \
        -rfE > "$work/words-cuda.txt" 2>&1
    stamp "words cuda test: $(tail -n 1 "$work/words-cuda.txt")" $?
    B=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 30 --backend triton --M 16,64
       --scheme mxfp8 --scheme mxfp6-e2m3)
    MOECERT_TRITON_E4M3_WORDS=0 timeout 70 $M "${B[@]}" --results "$work/bytes" \
        --run-id bytes > "$work/bytes.txt" 2>&1
    stamp bytes $?
    timeout 70 $M "${B[@]}" --results "$work/words" --run-id words > "$work/words.txt" 2>&1
    stamp words $?
    MOECERT_TRITON_E4M3_WORDS=0 timeout 70 $M "${B[@]}" --results "$work/bytes2" \
        --run-id bytes2 > "$work/bytes2.txt" 2>&1
    stamp bytes2 $?
    E=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 20 --backend triton
       --M 1,8,32,128 --scheme w4a8-int8 --model qwen3-30b-a3b --model mixtral-8x7b)
    timeout 60 $M "${E[@]}" --results "$work/e-tree" --run-id e-tree > "$work/e-tree.txt" 2>&1
    stamp e-tree $?
    MOECERT_TRITON_CONFIG_DIR=$PWD/.bench/r12t-before timeout 60 $M "${E[@]}" \
        --results "$work/e-before" --run-id e-before > "$work/e-before.txt" 2>&1
    stamp e-before $?
    batch_end
}

r12_m1() {  # round twelve, last call: Mixtral-8x7B W4A8 at M 1 ran 4.4% slower on the new
    # 32-row bucket than on the 128-row one before (r12-words): tuned at M 1 into a copy, then
    # M 1 / 2 / 4 with the files before (.bench/r12t-before, carried), the tree's, the copy's,
    # one process each (~130 s)
    batch_begin i44r12m 185
    gpu_versions
    [ -f .bench/r12t-before/h200.json ] || { echo "r12-m1: .bench/r12t-before missing (carry it)"; exit 2; }
    C=$work/cfg; cp -r kernels/triton_moe/configs "$C"
    tune_into "$C" m1 "80 --model mixtral-8x7b --scheme w4a8-int8 --M 1 --max-seconds 30"
    B=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 30 --backend triton
       --M 1,2,4 --scheme w4a8-int8 --model mixtral-8x7b)
    local run dir
    for run in before tree tuned; do
        dir=$PWD/kernels/triton_moe/configs
        [ $run = before ] && dir=$PWD/.bench/r12t-before
        [ $run = tuned ] && dir=$C
        MOECERT_TRITON_CONFIG_DIR=$dir timeout 30 $M "${B[@]}" --results "$work/$run" \
            --run-id "$run" > "$work/$run.txt" 2>&1
        stamp "$run" $?
    done
    batch_end
}

r14_begin() {  # r14_begin NAME TAR_AT: the batch, the base tree's shim (.bench/r14-base: git
    # archive 637bd11 kernels, carried; the other packages are unchanged since), the scaled
    # words' CUDA test
    batch_begin "$1" "$2"
    gpu_versions
    [ -d .bench/r14-base/kernels ] || { echo "$1: .bench/r14-base missing (git archive 637bd11 kernels | tar -x -C .bench/r14-base; carry it)"; exit 2; }
    tree_shim .bench/r14-base
    timeout 150 python -m pytest tests/kernels/test_e4m3_words_cuda.py -q -p no:cacheprovider \
        -rfE > "$work/e4m3-words-cuda.txt" 2>&1
    stamp "e4m3 words cuda test: $(tail -n 1 "$work/e4m3-words-cuda.txt")" $?
}

r14() {  # round fourteen: MXFP8's words decoded from their bit fields times the tile's scale
    # (E4M3_SCALED_WORDS, written without a GPU): its CUDA test first, then MXFP8 / MXFP6
    # decode against the tree before (.bench/r14-base = git archive 637bd11, carried), the
    # tree, the base, the tree again, one process each; then the `ci` suite's MXFP8 / MXFP6
    # cases on cuda (~400 s)
    r14_begin i44r14 570
    B=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 30 --backend triton --M 16,64
       --scheme mxfp8 --scheme mxfp6-e2m3)
    timeout 100 $M "${B[@]}" --results "$work/tree" --run-id tree > "$work/tree.txt" 2>&1
    stamp tree $?
    PYTHONPATH=/tmp/shim-r14-base timeout 100 python -m moecert.conformance.cli "${B[@]}" \
        --results "$work/base" --run-id base > "$work/base.txt" 2>&1
    stamp base $?
    timeout 80 $M "${B[@]}" --results "$work/tree2" --run-id tree2 > "$work/tree2.txt" 2>&1
    stamp tree2 $?
    timeout 100 $M run --suite ci --device cuda --backend triton --scheme mxfp8 \
        --scheme mxfp6-e2m3 -n auto --results "$work/ci-mx" > "$work/ci-mx.txt" 2>&1
    stamp "ci mxfp8 / mxfp6: $(grep -E '^(green|not green)' "$work/ci-mx.txt" | tail -1)" $?
    batch_end
}

r14b() {  # round fourteen, second call: the scaled words' tile spans any number of scale
    # blocks (BLOCK_K the config's, 128 in every tuned MXFP8 entry): the CUDA test, then MXFP8
    # decode with the tree's files / .bench/r14-base's tree / the tree's files with MXFP8's
    # BLOCK_K 64, one process each; then MXFP8 re-tuned at M 16 / 64 into a copy and the tree
    # against it (~480 s)
    r14_begin i44r14b 575
    B=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 30 --backend triton --M 16,64
       --scheme mxfp8)
    K64=$work/cfg-k64; cp -r kernels/triton_moe/configs "$K64"
    python - "$K64/h200.json" <<'PY'
import json, sys
path = sys.argv[1]
d = json.load(open(path))
for layer in d["layers"]:
    if layer["weight"] == "W_MXFP8":
        for bucket in layer["buckets"].values():
            bucket["gemm1"]["BLOCK_K"] = bucket["gemm2"]["BLOCK_K"] = 64
json.dump(d, open(path, "w"), indent=1)
PY
    timeout 70 $M "${B[@]}" --results "$work/tree" --run-id tree > "$work/tree.txt" 2>&1
    stamp tree $?
    PYTHONPATH=/tmp/shim-r14-base timeout 70 python -m moecert.conformance.cli "${B[@]}" \
        --results "$work/base" --run-id base > "$work/base.txt" 2>&1
    stamp base $?
    MOECERT_TRITON_CONFIG_DIR=$K64 timeout 70 $M "${B[@]}" --results "$work/k64" --run-id k64 \
        > "$work/k64.txt" 2>&1
    stamp k64 $?
    C=$work/cfg; cp -r kernels/triton_moe/configs "$C"
    tune_into "$C" mx "130 --model qwen3-30b-a3b --model mixtral-8x7b --scheme mxfp8 --max-seconds 25" \
        "110 --model deepseek-v3 --scheme mxfp8 --max-seconds 45"
    MOECERT_TRITON_CONFIG_DIR=$C timeout 60 $M "${B[@]}" --results "$work/tuned" \
        --run-id tuned > "$work/tuned.txt" 2>&1
    stamp tuned $?
    batch_end
}

r15() {  # round fifteen: MXFP6's codes in six-bit planes (layout.plane_fp6, written without
    # a GPU; the PTX emulated on the CPU): the CUDA tests, then MXFP6 (e2m3) decode in planes
    # and as bytes, then the planes' own tiles tuned into a copy (cfg/ in the tar) and timed.
    # R15_TUNE: the tuning steps (tune_into's); the first call (e4dd7ab's tree: a byte of top
    # bits per word) ran 20 s a layer and M for Qwen3-30B-A3B and Mixtral-8x7B, 35 for
    # DeepSeek-V3
    [ ${#R15_TUNE[@]} -gt 0 ] || R15_TUNE=(
        "90 --model qwen3-30b-a3b --scheme mxfp6-e2m3 --max-seconds 25"
        "150 --model mixtral-8x7b --scheme mxfp6-e2m3 --max-seconds 55"
        "150 --model deepseek-v3 --scheme mxfp6-e2m3 --max-seconds 55")
    batch_begin i44r15 570
    gpu_versions
    timeout 170 python -m pytest tests/kernels/test_fp6_planes_cuda.py \
        tests/kernels/test_e4m3_words_cuda.py -q -p no:cacheprovider -rfE \
        > "$work/fp6-cuda.txt" 2>&1
    local rc=$?
    stamp "fp6 planes / e4m3 words cuda tests: $(tail -n 1 "$work/fp6-cuda.txt")" $rc
    [ $rc -eq 0 ] || { batch_end; return; }
    B=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 30 --backend triton --M 16,64
       --scheme mxfp6-e2m3)
    MOECERT_TRITON_FP6_PLANES=1 timeout 55 $M "${B[@]}" --results "$work/planes" \
        --run-id planes > "$work/planes.txt" 2>&1
    stamp planes $?
    MOECERT_TRITON_FP6_PLANES=0 timeout 55 $M "${B[@]}" --results "$work/bytes" --run-id bytes \
        > "$work/bytes.txt" 2>&1
    stamp bytes $?
    C=$work/cfg; cp -r kernels/triton_moe/configs "$C"
    MOECERT_TRITON_FP6_PLANES=1 tune_into "$C" fp6 "${R15_TUNE[@]}"
    MOECERT_TRITON_FP6_PLANES=1 MOECERT_TRITON_CONFIG_DIR=$C timeout 55 $M "${B[@]}" --results "$work/tuned" \
        --run-id tuned > "$work/tuned.txt" 2>&1
    stamp tuned $?
    batch_end
}

r15_prefill() {  # fp8-w8a8 prefill on Mixtral-8x7B at M 1024 (62% of the GEMM rate; its round-
    # nine search was cut at 70 s) tuned for 100 s into a copy (cfg/ in the tar), then the tree
    # against the copy at M 1024, one process each (~200 s; the session's last 280 s of device
    # time: the watchdog tars at 230 s)
    batch_begin i44r15p 230
    gpu_versions
    C=$work/cfg; cp -r kernels/triton_moe/configs "$C"
    MOECERT_TRITON_CONFIG_DIR=$C timeout 140 $M tune --out "$C" --M 1024 --routings 2 \
        --model mixtral-8x7b --scheme fp8-w8a8 --max-seconds 100 > "$work/tune-fp8.txt" 2>&1
    stamp tune-fp8 $?
    B=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 20 --backend triton
       --M 1024 --scheme fp8-w8a8 --model mixtral-8x7b)
    timeout 40 $M "${B[@]}" --results "$work/tree" --run-id tree > "$work/tree.txt" 2>&1
    stamp tree $?
    MOECERT_TRITON_CONFIG_DIR=$C timeout 40 $M "${B[@]}" --results "$work/tuned" \
        --run-id tuned > "$work/tuned.txt" 2>&1
    stamp tuned $?
    batch_end
}

r16() {  # round sixteen (see the header): timing only; tests/kernels/test_tail_tiles_cuda.py
    # runs under tools/gpu_ci.sh
    batch_begin i44r16 560
    gpu_versions
    P=(bench --device cuda --mode graph --max-seconds 0.5 --repeats 30 --backend triton)
    local t
    for t in 0 32 64 16; do
        MOECERT_TRITON_TAIL_M=$t timeout 85 $M "${P[@]}" --model mixtral-8x7b --M 1024,4096 \
            --scheme bf16 --scheme fp8-w8a8 --scheme gptq-int4 --scheme awq-int4 \
            --scheme mxfp4 --scheme nvfp4 --results "$work/mx-$t" --run-id "mx-tail$t" \
            > "$work/mx-$t.txt" 2>&1
        stamp "mixtral tail=$t" $?
    done
    for t in 0 32; do
        MOECERT_TRITON_TAIL_M=$t timeout 50 $M "${P[@]}" --model qwen3-30b-a3b --M 1024,4096 \
            --scheme bf16 --scheme fp8-w8a8 --scheme gptq-int4 --scheme mxfp4 \
            --results "$work/qw-$t" --run-id "qw-tail$t" > "$work/qw-$t.txt" 2>&1
        stamp "qwen3 tail=$t" $?
    done
    batch_end
}

r16b() {  # round sixteen, the default's call (see the header)
    batch_begin i44r16b 560
    gpu_versions
    timeout 200 python -m pytest tests/kernels/test_tail_tiles_cuda.py -q -p no:cacheprovider \
        -rfE > "$work/tail-test.txt" 2>&1
    stamp "test_tail_tiles_cuda" $?
    GPU_CI_PART=suites GPU_CI_SUITE_S=200 OUT=$work/ci timeout 300 bash tools/gpu_ci.sh \
        > "$work/ci.txt" 2>&1
    stamp "gpu_ci suites" $?
    P=(bench --device cuda --mode graph --max-seconds 0.5 --repeats 30 --backend triton)
    local run
    for run in tree-1 zero-1 tree-2 zero-2; do
        local env=(); [ "${run%-*}" = zero ] && env=(MOECERT_TRITON_TAIL_M=0)
        env "${env[@]}" timeout 60 $M "${P[@]}" --model mixtral-8x7b --M 1024,4096 \
            --scheme gptq-int4 --scheme awq-int4 --scheme w4a8-int8 --scheme mxfp4 \
            --scheme nvfp4 --results "$work/mx-$run" --run-id "mx-$run" > "$work/mx-$run.txt" 2>&1
        stamp "mixtral $run" $?
    done
    for run in tree zero; do
        local env=(); [ $run = zero ] && env=(MOECERT_TRITON_TAIL_M=0)
        env "${env[@]}" timeout 40 $M "${P[@]}" --model qwen3-30b-a3b --M 1024,4096 \
            --scheme gptq-int4 --scheme awq-int4 --scheme mxfp4 --scheme nvfp4 \
            --results "$work/qw-$run" --run-id "qw-$run" > "$work/qw-$run.txt" 2>&1
        stamp "qwen3 $run" $?
    done
    batch_end
}

r16_tune() {  # round sixteen's tuner step (see the header)
    batch_begin i44r16t 560
    gpu_versions
    C=$work/cfg; cp -r kernels/triton_moe/configs "$C"
    local scheme
    for scheme in gptq-int4 nvfp4; do
        MOECERT_TRITON_CONFIG_DIR=$C timeout 150 $M tune --out "$C" --M 1024 --routings 2 \
            --model mixtral-8x7b --scheme $scheme --max-seconds 100 > "$work/tune-$scheme.txt" 2>&1
        stamp "tune $scheme" $?
    done
    B=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 20 --backend triton
       --M 1024,4096 --scheme gptq-int4 --scheme nvfp4 --model mixtral-8x7b)
    timeout 50 $M "${B[@]}" --results "$work/tree" --run-id tree > "$work/tree.txt" 2>&1
    stamp tree $?
    MOECERT_TRITON_CONFIG_DIR=$C timeout 50 $M "${B[@]}" --results "$work/tuned" \
        --run-id tuned > "$work/tuned.txt" 2>&1
    stamp tuned $?
    batch_end
}

table_r14() {  # round fourteen, third call: what the scaled words' wider tiles did where the
    # bench of r14b did not look (MXFP6 decode, MXFP8 prefill on Mixtral-8x7B: the tree against
    # .bench/r14-base, one process each), the issue's decode table with the peers, then MXFP8
    # on Mixtral-8x7B at M 64 (68.4% after r14b's 25 s) tuned for 60 s into a copy and timed
    # against the tree (carry .vllm and .bench/r14-base) (~450 s)
    batch_begin i44table14 575
    gpu_versions
    [ -d .bench/r14-base/kernels ] || { echo "table-r14: .bench/r14-base missing (carry it)"; exit 2; }
    tree_shim .bench/r14-base
    local X=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 20 --backend triton)
    local run
    for run in tree base; do
        local py=$PYTHONPATH; [ $run = base ] && py=/tmp/shim-r14-base
        PYTHONPATH=$py timeout 45 python -m moecert.conformance.cli "${X[@]}" --M 16,64 \
            --scheme mxfp6-e2m3 --results "$work/mx6-$run" --run-id "mx6-$run" \
            > "$work/mx6-$run.txt" 2>&1
        stamp "mx6-$run" $?
        PYTHONPATH=$py timeout 45 python -m moecert.conformance.cli "${X[@]}" --M 1024,4096 \
            --scheme mxfp8 --model mixtral-8x7b --results "$work/pre-$run" \
            --run-id "pre-$run" > "$work/pre-$run.txt" 2>&1
        stamp "pre-$run" $?
    done
    table_rows 110 150
    C=$work/cfg; cp -r kernels/triton_moe/configs "$C"
    tune_into "$C" mx64 "90 --model mixtral-8x7b --scheme mxfp8 --M 64 --max-seconds 60"
    local T=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 30 --backend triton
             --M 64 --scheme mxfp8 --model mixtral-8x7b)
    timeout 30 $M "${T[@]}" --results "$work/m64-tree" --run-id m64-tree > "$work/m64-tree.txt" 2>&1
    stamp m64-tree $?
    MOECERT_TRITON_CONFIG_DIR=$C timeout 30 $M "${T[@]}" --results "$work/m64-tuned" \
        --run-id m64-tuned > "$work/m64-tuned.txt" 2>&1
    stamp m64-tuned $?
    batch_end
}

gptq_m16() {  # round fourteen, last call: gptq-int4 on Mixtral-8x7B at M 16 (0.89x Marlin int4
    # in table-r14, the goal 0.85x; its entry predates rounds eleven and twelve) tuned for 90 s
    # into a copy, then the tree's files and the copy with Marlin int4 beside, one process
    # each (carry .vllm) (~220 s)
    batch_begin i44gptq16 400
    gpu_versions
    C=$work/cfg; cp -r kernels/triton_moe/configs "$C"
    tune_into "$C" g16 "120 --model mixtral-8x7b --scheme gptq-int4 --M 16 --max-seconds 90"
    # (tree_and_copy's 50 s a bench cut both: Marlin's library loads and its kernels compile
    # on top of the tree's, 2026-12-02)
    B=(bench --device cuda --mode graph --max-seconds 0.5 --repeats 50 --M 16 --backend triton
       --scheme gptq-int4 --model mixtral-8x7b --marlin-lib .vllm/_moe_C_stable_libtorch.abi3.so)
    timeout 110 $M "${B[@]}" --results "$work/tree" --run-id tree > "$work/tree.txt" 2>&1
    stamp tree $?
    MOECERT_TRITON_CONFIG_DIR=$C timeout 110 $M "${B[@]}" --results "$work/tuned" \
        --run-id tuned > "$work/tuned.txt" 2>&1
    stamp tuned $?
    batch_end
}

r17() {  # round seventeen: a nibble-plane tile's four plane products as one dot
    # (MOECERT_TRITON_ONE_DOT=1, an experiment switch) against the four dots: the planes' CUDA
    # tests under it, then decode (M 16 / 64, every layer) and Mixtral prefill, one process each
    batch_begin i44r17 560
    gpu_versions
    MOECERT_TRITON_ONE_DOT=1 timeout 120 python -m pytest tests/kernels/test_int4_pairs.py \
        tests/kernels/test_fp4_planes.py -q -p no:cacheprovider -rfE > "$work/tests.txt" 2>&1
    stamp "planes tests one-dot" $?
    local d=(bench --device cuda --mode graph --max-seconds 0.3 --repeats 30 --backend triton
             --M 16,64 --scheme nvfp4 --scheme mxfp4 --scheme gptq-int4 --scheme awq-int4
             --scheme w4a8-int8)
    local p=(bench --device cuda --mode graph --max-seconds 0.5 --repeats 30 --backend triton
             --model mixtral-8x7b --M 1024,4096 --scheme gptq-int4 --scheme awq-int4
             --scheme w4a8-int8 --scheme mxfp4 --scheme nvfp4)
    local v
    for v in 0 1; do
        MOECERT_TRITON_ONE_DOT=$v timeout 100 $M "${d[@]}" --results "$work/dec-$v" \
            --run-id "dec-one$v" > "$work/dec-$v.txt" 2>&1
        stamp "decode one-dot=$v" $?
    done
    for v in 0 1; do
        MOECERT_TRITON_ONE_DOT=$v timeout 70 $M "${p[@]}" --results "$work/pre-$v" \
            --run-id "pre-one$v" > "$work/pre-$v.txt" 2>&1
        stamp "prefill one-dot=$v" $?
    done
    # the FP4 prefill dispatch off at M 4096: the fused tile with one dot against it
    MOECERT_TRITON_ONE_DOT=1 MOECERT_TRITON_DEQUANT_ROWS=1000000 timeout 45 $M bench \
        --device cuda --mode graph --max-seconds 0.5 --repeats 30 --backend triton \
        --model mixtral-8x7b --M 4096 --scheme mxfp4 --scheme nvfp4 --results "$work/fused" \
        --run-id fused-one1 > "$work/fused.txt" 2>&1
    stamp "fp4 fused at 4096 one-dot=1" $?
    batch_end
}

r17b() {  # round seventeen, second call: ONE_DOT's default (FP4 on the swapped prefill tile);
    # the nibble kernels' CUDA tests with the new one (4 workers: the compiles share 16 cores),
    # then the default against MOECERT_TRITON_ONE_DOT=0, alternating processes, FP4 prefill on
    # Mixtral-8x7B, Qwen3-30B-A3B and gpt-oss-120b (~480 s)
    batch_begin i44r17b 560
    gpu_versions
    timeout 280 python -m pytest -n 4 -q -p no:cacheprovider -rfE \
        tests/kernels/test_one_dot_cuda.py tests/kernels/test_int4_pairs.py \
        tests/kernels/test_fp4_planes.py tests/kernels/test_fp4_prefill_cuda.py \
        tests/kernels/test_fp4_carry_cuda.py tests/kernels/test_fp4_scale_bf16_cuda.py \
        tests/kernels/test_zero_sums_cuda.py tests/kernels/test_tail_tiles_cuda.py \
        > "$work/tests.txt" 2>&1
    stamp "nibble CUDA tests" $?
    local p=(bench --device cuda --mode graph --max-seconds 0.4 --repeats 30 --backend triton
             --model mixtral-8x7b --model qwen3-30b-a3b --model gpt-oss-120b --M 1024,4096
             --scheme mxfp4 --scheme nvfp4)
    local run
    for run in tree-1 four-1 tree-2 four-2; do
        local env=(); [ "${run%-*}" = four ] && env=(MOECERT_TRITON_ONE_DOT=0)
        env "${env[@]}" timeout 55 $M "${p[@]}" --results "$work/$run" --run-id "$run" \
            > "$work/$run.txt" 2>&1
        stamp "fp4 prefill $run" $?
    done
    batch_end
}

r17c() {  # round seventeen, third call: test_one_dot_cuda.py with int4 in planes (its first
    # form found none there), the ci suite on cuda and the FP8 folders (gpu_ci.sh's suites),
    # DeepSeek-V3's FP4 prefill with the default against four dots (one pair), then FP4 decode
    # on Mixtral-8x7B tuned with ONE_DOT in the grid into a copy (cfg/ in the tar) and the
    # tree against the copy (~470 s)
    batch_begin i44r17c 560
    gpu_versions
    timeout 100 python -m pytest -n 4 -q -p no:cacheprovider -rfE \
        tests/kernels/test_one_dot_cuda.py > "$work/tests.txt" 2>&1
    stamp "test_one_dot_cuda" $?
    GPU_CI_PART=suites GPU_CI_SUITE_S=200 OUT=$work/ci timeout 260 bash tools/gpu_ci.sh \
        > "$work/ci.txt" 2>&1
    stamp "gpu_ci suites" $?
    local run
    for run in tree four; do
        local env=(); [ $run = four ] && env=(MOECERT_TRITON_ONE_DOT=0)
        env "${env[@]}" timeout 45 $M bench --device cuda --mode graph --max-seconds 0.4 \
            --repeats 20 --backend triton --model deepseek-v3 --M 4096 --scheme mxfp4 \
            --scheme nvfp4 --results "$work/ds-$run" --run-id "ds-$run" > "$work/ds-$run.txt" 2>&1
        stamp "deepseek fp4 prefill $run" $?
    done
    C=$work/cfg; cp -r kernels/triton_moe/configs "$C"
    tune_into "$C" fp4 "120 --model mixtral-8x7b --scheme nvfp4 --scheme mxfp4 --max-seconds 25"
    tree_and_copy "$C" bench --device cuda --mode graph --max-seconds 0.4 --repeats 30 \
        --backend triton --model mixtral-8x7b --M 16,64 --scheme nvfp4 --scheme mxfp4
    batch_end
}

r17d() {  # round seventeen, fourth call: FP4 decode (M 16 / 64) on the other layers tuned with
    # ONE_DOT in the grid into a copy of the tree's configs (r17c's Mixtral entries in it),
    # then the tree against the copy (cfg/ in the tar) (~330 s)
    batch_begin i44r17d 560
    gpu_versions
    C=$work/cfg; cp -r kernels/triton_moe/configs "$C"
    tune_into "$C" fp4 "100 --model gpt-oss-120b --scheme mxfp4 --max-seconds 20" \
        "120 --model deepseek-v3 --scheme nvfp4 --scheme mxfp4 --max-seconds 20" \
        "110 --model qwen3-30b-a3b --scheme nvfp4 --scheme mxfp4 --max-seconds 20"
    tree_and_copy "$C" bench --device cuda --mode graph --max-seconds 0.3 --repeats 30 \
        --backend triton --model gpt-oss-120b --model deepseek-v3 --model qwen3-30b-a3b \
        --M 16,64 --scheme nvfp4 --scheme mxfp4
    batch_end
}

r18() {  # round eighteen: int4 planes with 16-bit activations scaled inside the decode under
    # ONE_DOT (the default on the swapped prefill tile): the nibble kernels' CUDA tests, then
    # gptq-int4 / awq-int4 prefill (M 1024 / 4096), the default against MOECERT_TRITON_ONE_DOT=0,
    # alternating processes: Mixtral-8x7B, Qwen3-30B-A3B and DeepSeek-V3, then a second pair on
    # Mixtral-8x7B (~400 s)
    batch_begin i44r18 560
    gpu_versions
    timeout 200 python -m pytest -n 4 -q -p no:cacheprovider -rfE \
        tests/kernels/test_one_dot_cuda.py tests/kernels/test_int4_pairs.py \
        tests/kernels/test_fp4_planes.py tests/kernels/test_zero_sums_cuda.py \
        tests/kernels/test_tail_tiles_cuda.py > "$work/tests.txt" 2>&1
    stamp "nibble CUDA tests" $?
    local p=(bench --device cuda --mode graph --max-seconds 0.4 --repeats 20 --backend triton
             --M 1024,4096 --scheme gptq-int4 --scheme awq-int4)
    local run models
    for run in four one four2 one2; do
        local env=(); [[ $run == four* ]] && env=(MOECERT_TRITON_ONE_DOT=0)
        models=(--model mixtral-8x7b --model qwen3-30b-a3b --model deepseek-v3)
        [[ $run == *2 ]] && models=(--model mixtral-8x7b)
        env "${env[@]}" timeout 110 $M "${p[@]}" "${models[@]}" --results "$work/pre-$run" \
            --run-id "pre-$run" > "$work/pre-$run.txt" 2>&1
        stamp "prefill $run" $?
    done
    batch_end
}

r18b() {  # round eighteen, second call (the decode's scale rounded by rne_bf16, not the cast):
    # the int4 CUDA tests, AWQ prefill default against MOECERT_TRITON_ONE_DOT=0 (one pair,
    # Mixtral-8x7B), then the conformance cases of tools/i44_r18_cases.jsonl (Mixtral-8x7B at
    # M 1024: the int4 schemes with zero points on the one-dot prefill tile, gptq-int4 with
    # ONE_DOT forced) against the float64 reference (~330 s)
    batch_begin i44r18b 560
    gpu_versions
    timeout 150 python -m pytest -n 4 -q -p no:cacheprovider -rfE \
        tests/kernels/test_one_dot_cuda.py tests/kernels/test_int4_pairs.py \
        tests/kernels/test_zero_sums_cuda.py > "$work/tests.txt" 2>&1
    stamp "int4 CUDA tests" $?
    local run
    for run in four one; do
        local env=(); [ $run = four ] && env=(MOECERT_TRITON_ONE_DOT=0)
        env "${env[@]}" timeout 60 $M bench --device cuda --mode graph --max-seconds 0.4 \
            --repeats 20 --backend triton --M 1024,4096 --scheme awq-int4 \
            --model mixtral-8x7b --results "$work/pre-$run" --run-id "pre-$run" \
            > "$work/pre-$run.txt" 2>&1
        stamp "awq prefill $run" $?
    done
    run_cases tools/i44_r18_cases.jsonl 90 MOECERT_TRITON_ONE_DOT=1
    batch_end
}

table18() {  # the issue's table from one call, the peers beside it: decode (table_rows), then
    # prefill on Mixtral-8x7B at M 1024 / 4096 (carry .vllm) (~540 s)
    batch_begin i44table18 575
    gpu_versions
    table_rows 150 250
    timeout 90 $M bench --device cuda --mode graph --max-seconds 0.3 --repeats 20 \
        --backend triton --model mixtral-8x7b --M 1024,4096 --scheme bf16 --scheme fp8-w8a8 \
        --scheme gptq-int4 --scheme awq-int4 --scheme mxfp4 --scheme nvfp4 \
        --results "$work/prefill" --run-id prefill > "$work/prefill.txt" 2>&1
    stamp prefill $?
    batch_end
}

r18_tune() {  # round eighteen, the decode entries: gptq-int4 (Mixtral-8x7B, DeepSeek-V3: 0.89 /
    # 0.94x Marlin int4 at M 16 in table18) and awq-int4 (Mixtral-8x7B: 55-67% of the memory
    # floor) tuned with the scaled one-dot decode in the grid into a copy (cfg/ in the tar),
    # then the tree and the copy, Marlin int4 beside gptq, one process each (carry .vllm)
    # (~310 s)
    batch_begin i44r18t 565
    gpu_versions
    C=$work/cfg; cp -r kernels/triton_moe/configs "$C"
    tune_into "$C" i4 "110 --model mixtral-8x7b --model deepseek-v3 --scheme gptq-int4 --max-seconds 16" \
        "60 --model mixtral-8x7b --scheme awq-int4 --max-seconds 18"
    local B=(bench --device cuda --mode graph --max-seconds 0.4 --repeats 30 --backend triton
             --M 16,64 --marlin-lib .vllm/_moe_C_stable_libtorch.abi3.so --scheme gptq-int4
             --scheme awq-int4 --model mixtral-8x7b --model deepseek-v3)
    timeout 70 $M "${B[@]}" --results "$work/tree" --run-id tree > "$work/tree.txt" 2>&1
    stamp tree $?
    MOECERT_TRITON_CONFIG_DIR=$C timeout 70 $M "${B[@]}" --results "$work/tuned" \
        --run-id tuned > "$work/tuned.txt" 2>&1
    stamp tuned $?
    batch_end
}

r19() {  # round nineteen, the int4 prefill dispatch: the CUDA tests it touches (int4 prefill,
    # one dot, FP4 prefill); Mixtral-8x7B gptq-int4 / awq-int4 at M 1024 / 2048 / 4096 (256 /
    # 512 / 1024 rows per expert) and Qwen3-30B-A3B at M 4096 / 8192 with the dispatch at every
    # size (MOECERT_TRITON_DEQUANT_ROWS=0) and at none (off), one process each, bf16 beside;
    # then tools/i44_r19_cases.jsonl (Mixtral-8x7B at M 2048: the default takes the dispatch)
    # against the float64 reference (~420 s)
    batch_begin i44r19 565
    gpu_versions
    timeout 170 python -m pytest -n 4 -q -p no:cacheprovider -rfE \
        tests/kernels/test_int4_prefill_cuda.py tests/kernels/test_one_dot_cuda.py \
        tests/kernels/test_fp4_prefill_cuda.py > "$work/tests.txt" 2>&1
    stamp "CUDA tests" $?
    local rows extra B=(bench --device cuda --mode graph --max-seconds 0.25 --repeats 15
                        --backend triton --scheme gptq-int4 --scheme awq-int4)
    for rows in 0 off; do
        extra=(); [[ $rows == 0 ]] && extra=(--scheme bf16)
        MOECERT_TRITON_DEQUANT_ROWS=$rows timeout 80 $M "${B[@]}" "${extra[@]}" \
            --model mixtral-8x7b --M 1024,2048,4096 --results "$work/mix$rows" \
            --run-id "mix$rows" > "$work/mix$rows.txt" 2>&1
        stamp "mixtral rows=$rows" $?
        MOECERT_TRITON_DEQUANT_ROWS=$rows timeout 50 $M "${B[@]}" --model qwen3-30b-a3b \
            --M 4096,8192 --results "$work/qwen$rows" --run-id "qwen$rows" \
            > "$work/qwen$rows.txt" 2>&1
        stamp "qwen3 rows=$rows" $?
    done
    run_cases tools/i44_r19_cases.jsonl 80
    batch_end
}

r19b() {  # round nineteen, second call: the int4 thresholds (DEQUANT_ROWS_INT4) as the default.
    # The prefill CUDA tests; Mixtral-8x7B prefill at M 1024 / 2048 / 4096, every scheme of the
    # issue's table (the default), then gptq-int4 / awq-int4 with the dispatch off and with the
    # default again, one process each (~200 s; then GPU_CI_PART=suites tools/gpu_ci.sh)
    batch_begin i44r19b 380
    gpu_versions
    timeout 120 python -m pytest -n 4 -q -p no:cacheprovider -rfE \
        tests/kernels/test_int4_prefill_cuda.py tests/kernels/test_fp4_prefill_cuda.py \
        > "$work/tests.txt" 2>&1
    stamp "CUDA tests" $?
    local B=(bench --device cuda --mode graph --max-seconds 0.25 --repeats 15 --backend triton
             --model mixtral-8x7b --M 1024,2048,4096)
    timeout 100 $M "${B[@]}" --scheme bf16 --scheme fp8-w8a8 --scheme gptq-int4 \
        --scheme awq-int4 --scheme mxfp4 --scheme nvfp4 --results "$work/table" \
        --run-id table > "$work/table.txt" 2>&1
    stamp table $?
    MOECERT_TRITON_DEQUANT_ROWS=off timeout 60 $M "${B[@]}" --scheme gptq-int4 \
        --scheme awq-int4 --results "$work/off" --run-id off > "$work/off.txt" 2>&1
    stamp off $?
    timeout 60 $M "${B[@]}" --scheme gptq-int4 --scheme awq-int4 --results "$work/again" \
        --run-id again > "$work/again.txt" 2>&1
    stamp again $?
    batch_end
}

r19c() {  # round nineteen, third call: the W16 prefill tile's entries (bf16's, which the
    # dispatch's W16 tile also reads) tuned again on Mixtral-8x7B at M 1024 / 4096 for longer
    # than round nine's cut 70 s, and fp8-w8a8 at M 1024 (cut at 70 s then), into a copy
    # (cfg/ in the tar); then the prefill of every scheme in the issue's table with the tree's
    # files and the copy's, alternating, two processes each (~470 s)
    retune_w16 i44r19c
}

r19d() {  # round nineteen, last call: the CUDA files the round's calls had not run (the int4
    # ones through `_planes_part`, and those the twenty-ninth session left out), then the FP4
    # dispatch against the fused one-dot tile at its threshold (Mixtral-8x7B M 2048, 512 rows
    # per expert), the default and MOECERT_TRITON_DEQUANT_ROWS=off alternating (~330 s)
    batch_begin i44r19d 560
    gpu_versions
    timeout 300 python -m pytest -n 4 -q -p no:cacheprovider -rfE \
        tests/kernels/test_int4_pairs.py tests/kernels/test_zero_sums_cuda.py \
        tests/kernels/test_tail_tiles_cuda.py tests/kernels/test_fp4_planes.py \
        tests/kernels/test_grouped_capture.py tests/reference/test_devices.py \
        > "$work/tests.txt" 2>&1
    stamp "CUDA files" $?
    timeout 120 python -m pytest -q -p no:cacheprovider -rfE tests/kernels/test_grouped_fp8.py \
        > "$work/tests-fp8.txt" 2>&1  # (alone: its own process, as tools/gpu_ci.sh runs it)
    stamp "test_grouped_fp8.py" $?
    local B=(bench --device cuda --mode graph --max-seconds 0.25 --repeats 15
             --backend triton --model mixtral-8x7b --M 1024,2048,4096 --scheme mxfp4
             --scheme nvfp4)
    pairs 40 default "" off MOECERT_TRITON_DEQUANT_ROWS=off "${B[@]}"
    batch_end
}

r20() {  # round twenty, the weight tile by TMA (gemm_kernel's TMA_B, on by default on sm90):
    # the CUDA tests of the W16 / ACC_DOT tiles it changes; Mixtral-8x7B prefill at M 1024 /
    # 4096, every scheme of the issue's table, the default against MOECERT_TRITON_TMA_B=0,
    # alternating, two processes each; bf16 decode (M 16 / 64, the bench's layers) both ways
    # (~450 s)
    batch_begin i44r20 565
    gpu_versions
    timeout 200 python -m pytest -n 4 -q -p no:cacheprovider -rfE \
        tests/kernels/test_tma_b_cuda.py tests/kernels/test_fused_activation_cuda.py \
        tests/kernels/test_int4_prefill_cuda.py tests/kernels/test_fp4_prefill_cuda.py \
        tests/kernels/test_tail_tiles_cuda.py > "$work/tests.txt" 2>&1
    stamp "CUDA tests" $?
    pairs 45 tma "" off MOECERT_TRITON_TMA_B=0 "${PREFILL_TABLE[@]}"
    local D=(bench --device cuda --mode graph --max-seconds 0.25 --repeats 15
             --backend triton --scheme bf16 --M 16,64)
    timeout 40 $M "${D[@]}" --results "$work/dec-tma" --run-id dec-tma > "$work/dec-tma.txt" 2>&1
    stamp "decode tma" $?
    MOECERT_TRITON_TMA_B=0 timeout 40 $M "${D[@]}" --results "$work/dec-off" --run-id dec-off \
        > "$work/dec-off.txt" 2>&1
    stamp "decode off" $?
    batch_end
}

r20b() {  # round twenty, second call: TMA_B for fp8 / int8 weights with a scale per tile too
    # (DeepSeek's blocks: the issue's fp8-w8a8 row). The TMA CUDA test; Mixtral-8x7B prefill
    # (bf16, fp8-w8a8) at M 1024 / 4096, the default against MOECERT_TRITON_TMA_B=0,
    # alternating, two each; Qwen3-30B-A3B and DeepSeek-V3 at M 4096 and fp8-w8a8's decode
    # (M 16 / 64, the bench's layers), one each way (~230 s; then
    # GPU_CI_PART=suites tools/gpu_ci.sh)
    batch_begin i44r20b 300
    gpu_versions
    timeout 90 python -m pytest -q -p no:cacheprovider -rfE tests/kernels/test_tma_b_cuda.py \
        > "$work/tests.txt" 2>&1
    stamp "CUDA test" $?
    local run B=(bench --device cuda --mode graph --max-seconds 0.25 --repeats 15
                 --backend triton --scheme bf16 --scheme fp8-w8a8)
    pairs 30 tma "" off MOECERT_TRITON_TMA_B=0 "${B[@]}" --model mixtral-8x7b --M 1024,4096
    for run in tma off; do
        MOECERT_TRITON_TMA_B=$([[ $run == tma ]] && echo 1 || echo 0) timeout 35 $M "${B[@]}" \
            --model qwen3-30b-a3b --model deepseek-v3 --M 4096 --results "$work/other-$run" \
            --run-id "other-$run" > "$work/other-$run.txt" 2>&1
        stamp "other $run" $?
        MOECERT_TRITON_TMA_B=$([[ $run == tma ]] && echo 1 || echo 0) timeout 30 $M bench \
            --device cuda --mode graph --max-seconds 0.25 --repeats 15 --backend triton \
            --scheme fp8-w8a8 --M 16,64 --results "$work/dec-$run" --run-id "dec-$run" \
            > "$work/dec-$run.txt" 2>&1
        stamp "decode $run" $?
    done
    batch_end
}

r20c() {  # round twenty, third call: the W16 prefill entries (bf16's, which the dispatch's W16
    # tile also reads) and fp8-w8a8's tuned again on Mixtral-8x7B at M 1024 / 4096 with the
    # weight tile by TMA (registers freed: other tiles may now win), into a copy (cfg/ in the
    # tar); then the prefill of every scheme in the issue's table with the tree's files and
    # the copy's, alternating, two processes each (~500 s)
    retune_w16 i44r20c
}

r20d() {  # round twenty, last call: the prefill table on the tree with the 2048-row bf16 bucket
    # of r20c, two processes, and one with MOECERT_TRITON_TMA_B=0 (~80 s; then the CUDA files:
    # GPU_CI_PART=files GPU_CI_SKIP=test_mps_cuda.py tools/gpu_ci.sh)
    batch_begin i44r20d 200
    gpu_versions
    local run
    for run in 1 off 2; do
        MOECERT_TRITON_TMA_B=$([[ $run == off ]] && echo 0) timeout 45 $M "${PREFILL_TABLE[@]}" \
            --results "$work/table$run" --run-id "table$run" > "$work/table$run.txt" 2>&1
        stamp "table $run" $?
    done
    batch_end
}

r21() {  # round twenty-one (written 2026-12-03, not yet run): the W16 prefill entries tuned again
    # now that the tuner tries SPLIT_K on a short grid with a thin last wave (tune.
    # SHORT_GRID_WAVES: Mixtral-8x7B's GEMM2 at M 1024, 2.3-2.4 waves), into a copy; then the
    # prefill table, tree against copy, alternating (~500 s)
    retune_w16 i44r21
}

case "${1:-}" in
    tune-w4a8) tune_w4a8 ;;
    tune-fp) tune_fp ;;
    tune-nvfp4) tune_nvfp4 ;;
    round7) round7 ;;
    int4-lookup) int4_lookup ;;
    tune-stale) tune stale "200 --model gpt-oss-120b --scheme mxfp4" ;;
    tune-qwen) tune qwen "150 --model qwen3-30b-a3b --scheme nvfp4 --scheme mxfp4" ;;
    tune-awq) tune awq "150 --model qwen3-30b-a3b --model mixtral-8x7b --scheme awq-int4" \
        "200 --model deepseek-v3 --scheme awq-int4" ;;
    stages-awq) stages_awq ;;
    tune-awq-m64) tune awq64 "130 --model mixtral-8x7b --scheme awq-int4 --M 64" ;;
    bench) bench ;;
    table) table ;;
    awq-m1) awq_m1 ;;
    peer-routing) peer_routing ;;
    w4a8-m64) w4a8_m64 ;;
    prefill) prefill ;;
    swap) swap ;;
    round9) round9 ;;
    verify) verify ;;
    tune-prefill) tune_prefill ;;
    edges) edges ;;
    decode-check) decode_check ;;
    fused) fused ;;
    fused-verify) fused_verify ;;
    tune-m64) tune_m64 ;;
    m64-edges) m64_edges ;;
    tune-fused) tune_fused ;;
    fp8-fused) fp8_fused ;;
    r11) r11 ;;
    r11b) r11b ;;
    table-r11) table_r11 ;;
    r12) r12 ;;
    r12-tune) r12_tune ;;
    r12-words) r12_words ;;
    r12-m1) r12_m1 ;;
    r13) r13 ;;
    r13-tune) r13_tune ;;
    table-r13) table_r13 ;;
    r14) r14 ;;
    r14b) r14b ;;
    table-r14) table_r14 ;;
    gptq-m16) gptq_m16 ;;
    r15) r15 ;;
    r15-prefill) r15_prefill ;;
    r16) r16 ;;
    r16b) r16b ;;
    r16-tune) r16_tune ;;
    r17) r17 ;;
    r17b) r17b ;;
    r17c) r17c ;;
    r17d) r17d ;;
    r18) r18 ;;
    r18b) r18b ;;
    table18) table18 ;;
    r18-tune) r18_tune ;;
    r19) r19 ;;
    r19b) r19b ;;
    r19c) r19c ;;
    r19d) r19d ;;
    r20) r20 ;;
    r20b) r20b ;;
    r20c) r20c ;;
    r20d) r20d ;;
    r21) r21 ;;
    *) echo "usage: tools/i44_tune_gpu.sh tune-w4a8|tune-fp|tune-nvfp4|round7|int4-lookup|tune-stale|tune-qwen|tune-awq|stages-awq|tune-awq-m64|bench|table|awq-m1|peer-routing|w4a8-m64|prefill|swap|round9|verify|tune-prefill|edges|decode-check|fused|fused-verify|tune-m64|m64-edges|tune-fused|fp8-fused|r11|r11b|table-r11|r12|r12-tune|r12-words|r12-m1|r13|r13-tune|table-r13|r14|r14b|table-r14|gptq-m16|r15|r15-prefill|r16|r16b|r16-tune|r17|r17b|r17c|r17d|r18|r18b|table18|r18-tune|r19|r19b|r19c|r19d|r20|r20b|r20c|r20d" >&2; exit 2 ;;
esac
