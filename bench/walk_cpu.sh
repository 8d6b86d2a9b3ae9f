#!/bin/bash
# Benchmark (not a test): one listing walk of a mounted run, its time and the CPU of the daemon
# and its HDF5 helpers (utime+stime from /proc, 10 ms ticks). Mounts in the foreground so that
# the helpers are the daemon's children. Run as root (or with /dev/fuse access).
# Usage: bench/walk_cpu.sh <mount.h5direct> <source dir> [mount options...]
# Example (the run of bench_run_mount.py): bench/walk_cpu.sh build/daemon/mount.h5direct /tmp/h5d-bench-iso/raw/r0338
set -euo pipefail
BIN=$1
SRC=$2
shift 2
MNT=$(mktemp -d /tmp/h5d-walk-XXXXXX)
"$BIN" "$SRC" "$MNT" -f "$@" 2>"$MNT.log" &
PID=$!
for _ in $(seq 200); do mountpoint -q "$MNT" && break; sleep 0.05; done
sleep 0.3
ticks() { local t=0 s; for p in "$@"; do s=$(awk '{print $14+$15}' "/proc/$p/stat"); t=$((t + s)); done; echo "$t"; }
c0=$(ticks $PID $(pgrep -P $PID)); t0=$(date +%s%N)
find "$MNT" -exec stat {} + > /dev/null
t1=$(date +%s%N)
kids=$(pgrep -P $PID || true)
c1=$(ticks $PID $kids); h=$(ticks $kids)
echo "walk $(( (t1 - t0) / 1000000 )) ms cpu $(( (c1 - c0) * 10 )) ms (helpers $((h * 10)) ms since they started)"
fusermount3 -u "$MNT"; wait $PID || true
rmdir "$MNT"; rm -f "$MNT.log"
