# Sourced by the one-call GPU batches (tools/i41_gpu2.sh, i41_gpu4.sh, i41_gpu6.sh): their
# results folder /tmp/NAME, tarred to $OUT/i41.tgz at the end, and by a watchdog at TAR_AT
# seconds if the device call's own limit (600 s) would come first (tools/i41_i44_gpu.sh
# outran it on 2026-11-30 and brought nothing back).
#   batch_begin NAME TAR_AT; ...; stamp "step" $?; ...; batch_end
batch_begin() {
  final=${OUT:-/tmp/out}; mkdir -p "$final"
  batch_name=$1; work=/tmp/$1; rm -rf "$work"; mkdir -p "$work"
  start=$(date +%s)
  ( sleep "$2"; echo "watchdog: tar at $2 s" >> "$work/times.txt"; batch_pack ) \
      < /dev/null > /dev/null 2>&1 &
  watchdog=$!
}
stamp() { echo "$1 exit $2 at $(( $(date +%s) - start )) s" >> "$work/times.txt"; }
batch_pack() { tar -czf "$final/i41.tgz" -C /tmp "$batch_name" 2>/dev/null; }
batch_end() {
  # the watchdog shell first, then its sleep: killing the sleep first let the shell go on to
  # write its line and tar (every batch's times.txt said "watchdog: tar" until 2026-12-01)
  local sleeper; sleeper=$(pgrep -P "$watchdog")
  kill "$watchdog" 2>/dev/null; [ -n "$sleeper" ] && kill $sleeper 2>/dev/null
  batch_pack
  cat "$work/times.txt"
}
# No install on the GPU machine: moecert from this checkout through a PYTHONPATH shim, the
# device's own Triton (not the interpreter) and tuned files; the machine and versions into
# $work/gpu.txt (after batch_begin).
use_checkout() {
  mkdir -p /tmp/shim/moecert
  for d in reference kernels conformance reports; do ln -sfn "$PWD/$d" "/tmp/shim/moecert/$d"; done
  export PYTHONPATH=/tmp/shim
  unset TRITON_INTERPRET MOECERT_TRITON_CONFIG_DIR
}
record_machine() {
  { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
    python -c "import torch, triton; print(torch.__version__, triton.__version__)"; } > "$work/gpu.txt"
}
