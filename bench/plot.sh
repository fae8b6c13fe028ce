#!/usr/bin/env bash
# Runs the benchmarks behind docs/performance.md, draws
# bench/results/performance.png (gnuplot): GB/s vs block size per transport
# against its same-run baseline, and rooms/s vs rooms in flight; and writes
# the figures table of docs/performance.md from the same run (table.py).
#
#   bash bench/plot.sh [build-dir]      # needs gnuplot (apt install gnuplot-nox)
#   SKIP_RUN=1 bash bench/plot.sh       # redraw from the JSON already there
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=bench/results
bench=$build/bench/kvroom-bench
mkdir -p "$out"
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot not found (apt install gnuplot-nox)"; exit 1; }

if [ -z "${SKIP_RUN:-}" ]; then
  "$bench" bandwidth --seconds=10 --transports=local,shm,tcp,verbs,cuda --batches=8 \
    --blocks=4096,16384,65536,262144,1048576,4194304 --json=$out/bandwidth.json
  "$bench" rooms --seconds=1.5 --concurrency=1,4,16,64,256,1024,4096 --json=$out/rooms_1p1d.json
  "$bench" rooms --seconds=1.5 --tp=2 --concurrency=1,4,16,64,256,1024,4096 --json=$out/rooms_2p2d.json
  "$bench" processes --rooms=3000 --tps=1,2 --concurrency=1,4,16,64,256,1024 --json=$out/processes.json
  "$bench" latency --json=$out/latency.json
  "$bench" poll --json=$out/poll.json
  "$bench" memory --json=$out/memory.json
  "$bench" detect --trials=5 --json=$out/detect.json
fi

# Our JSON puts one field per line; flatten each point into a TSV row.
points() {  # file, fields...
  local file=$1; shift
  awk -v want="$*" '
    BEGIN { n = split(want, keys, " ") }
    /"[a-z_]+": / {
      line = $0; sub(/^[ \t]*"/, "", line)
      k = line; sub(/".*/, "", k)
      v = line; sub(/^[^:]*: /, "", v); sub(/,$/, "", v); gsub(/"/, "", v)
      cur[k] = v
    }
    /}/ {
      ok = 1; row = ""
      for (i = 1; i <= n; ++i) { if (!(keys[i] in cur)) ok = 0; row = row (i > 1 ? "\t" : "") cur[keys[i]] }
      if (ok) print row
      delete cur
    }' "$file"
}

tmp=$(mktemp -d)
for t in local shm tcp verbs cuda; do
  points $out/bandwidth.json transport block_bytes gb_per_s baseline_gb_per_s | awk -v t=$t '$1 == t' > $tmp/bw_$t.tsv
done
points $out/rooms_1p1d.json concurrency rooms_per_s caf_bound_rooms_per_s > $tmp/rooms_1p1d.tsv
points $out/rooms_2p2d.json concurrency rooms_per_s caf_bound_rooms_per_s > $tmp/rooms_2p2d.tsv
points $out/processes.json tp concurrency rooms_per_s | awk '$1 == 1 {print $2 "\t" $3}' > $tmp/proc_1p1d.tsv
points $out/processes.json tp concurrency rooms_per_s | awk '$1 == 2 {print $2 "\t" $3}' > $tmp/proc_2p2d.tsv

plots=""
color=1
for t in local shm tcp verbs cuda; do
  [ -s $tmp/bw_$t.tsv ] || continue
  plots="$plots '$tmp/bw_$t.tsv' using (\$2/1024):3 with linespoints lw 2 lc $color title '$t',"
  plots="$plots '$tmp/bw_$t.tsv' using (\$2/1024):4 with lines dt 2 lw 2 lc $color title '$t baseline',"
  color=$((color + 1))
done

gnuplot <<GP
set terminal pngcairo size 1400,560 font ",11"
set output '$out/performance.png'
set multiplot layout 1,2 title "kvroom on this machine (2 cores): same-run baselines dashed"
set logscale x 2
set logscale y
set xlabel "block size (KiB), 8 writes per batch"
set ylabel "GB/s"
set key bottom left
set grid
set title "bandwidth per transport vs baseline (memcpy; plain socket for tcp)"
plot ${plots%,}
set logscale xy
set xlabel "rooms in flight"
set ylabel "rooms/s (tiny rooms)"
set title "room throughput"
set key bottom right
plot '$tmp/rooms_1p1d.tsv' using 1:2 with linespoints lw 2 title '1P x 1D, one process', \
     '$tmp/rooms_2p2d.tsv' using 1:2 with linespoints lw 2 title '2P x 2D, one process', \
     '$tmp/proc_1p1d.tsv' using 1:2 with linespoints lw 2 title '1P x 1D, two processes', \
     '$tmp/proc_2p2d.tsv' using 1:2 with linespoints lw 2 title '2P x 2D, four processes', \
     '$tmp/rooms_1p1d.tsv' using 1:3 with lines dt 2 title 'CAF bound, 1P x 1D'
unset multiplot
GP
rm -rf $tmp
echo "plot.sh: wrote $out/performance.png"
# The figures table of docs/performance.md, from the same run's JSON.
python3 bench/table.py "$out" --into=docs/performance.md
