#!/usr/bin/env bash
# Real processes on loopback (or in the test's own network namespaces):
#   multiprocess_test.sh KVROOM_BINARY SCENARIO WORKDIR [KVROOM_STRANGER]
# Scenarios: transfer (auto: shm on one host), transfer_shm, transfer_tcp, transfer_pull,
# sigkill, sigkill_pull, sigkill_decode, sigstop, malformed, netns, registry_restart, registry_false_down,
# registry_false_down_kill, dp_groups, auth, tls,
# parallel, metrics, paths, netns_paths, idle_links; etcd_cluster, etcd_sigkill,
# etcd_refusals, etcd_scale, etcd_secured, etcd_lease (etcd_scenarios.sh).
# Every process it starts is killed on exit; every wait is bounded. Exit 0
# passes, 1 fails, 77 skips (with the reason on stdout).
set -u
K=$1
SCENARIO=$2
WORK=$3
STRANGER=${4:-}
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
PIDS=()
NETNS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  # A killed rank cannot unlink its shared KV segments.
  for p in "${PIDS[@]}"; do rm -f /dev/shm/kvroom-"$p"-* 2>/dev/null; done
  for n in "${NETNS[@]}"; do ip netns del "$n" 2>/dev/null; done
}
trap cleanup EXIT
# Every deployment proves membership with a secret of its own.
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$WORK/secret" && chmod 600 "$WORK/secret"
SECRET=--secret-file=$WORK/secret
fail() { echo "FAIL: $*"; for f in *.log; do echo "--- $f"; tail -n 20 "$f"; done; exit 1; }
now_ms() { date +%s%3N; }
# Below the kernel's ephemeral range (32768 up): an outgoing connection
# cannot be holding the port the test is about to listen on.
port() { echo $((20000 + ($$ * 7 + RANDOM) % 12000)); }

# start NAME ARGS...: a rank in the background, its stdout in NAME.log.
start() {
  local name=$1; shift
  "$@" > "$name.log" 2>&1 &
  PIDS+=($!)
  eval "PID_$name=$!"
}

# wait_for PATTERN FILE SECONDS
wait_for() {
  local deadline=$(( $(date +%s) + $3 ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    grep -q "$1" "$2" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

# wait_exit PID SECONDS: 0 when the process ended in time.
wait_exit() {
  local deadline=$(( $(date +%s) + $2 ))
  while kill -0 "$1" 2>/dev/null; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.05
  done
}

# rooms FILE STATE: how many rooms of the report ended in STATE.
rooms() { grep -c "\"state\": \"$2\"" "$1" 2>/dev/null || true; }

# start_rooms TAG NAMES...: once every named rank printed "ready" (it is
# registered), they open their rooms (they were started with
# --wait-file=$WORK/start_TAG). A room's bootstrap deadline then measures
# kvroom, not how long a loaded machine takes to start the other processes
# (5-6 s seen under load, past a 5 s deadline).
start_rooms() {
  local tag=$1; shift
  for r in "$@"; do wait_for '"ready"' "$r.log" 60 || fail "$r not ready"; done
  touch "$WORK/start_$tag"
}

group() { # group PORT EXTRA_ARGS... : 2 prefill + 2 decode ranks, TP=2 (DECODE_ARGS: the decode ranks' own)
  local p=$1; shift
  local dargs=(${DECODE_ARGS:-})
  rm -f "$WORK/start_$p"
  local go=--wait-file="$WORK/start_$p"
  start p0 "$K" serve "$SECRET" --role=prefill --tp=0 --tp-size=2 --bootstrap-port="$p" --publish-registry --report=p0.json "$go" "$@"
  start p1 "$K" serve "$SECRET" --role=prefill --tp=1 --tp-size=2 --bootstrap-port="$p" --report=p1.json "$go" "$@"
  start d0 "$K" serve "$SECRET" --role=decode --tp=0 --tp-size=2 --bootstrap-port="$p" --report=d0.json "$go" "$@" "${dargs[@]}"
  start d1 "$K" serve "$SECRET" --role=decode --tp=1 --tp-size=2 --bootstrap-port="$p" --report=d1.json "$go" "$@" "${dargs[@]}"
  start_rooms "$p" p0 p1 d0 d1
}

# namespaces NP ND: two network namespaces, prefill's ($np) and decode's
# ($nd), loopback up in each; exits 77 (skipped, with the reason) where
# this machine does not allow them.
registry_group() { # registry_group "REGISTRY_ARGS" SERVE_ARGS...: a standalone registry on REG_PORT and the 2P x 2D group on it (DECODE_ARGS: the decode ranks' own)
  REG_PORT=$(port)
  local rargs=($1); shift
  local dargs=(${DECODE_ARGS:-})
  start reg "$K" registry "$SECRET" --bootstrap-port="$REG_PORT" "${rargs[@]}"
  wait_for '"ready"' reg.log 20 || fail "registry not ready"
  for r in p0 p1 d0 d1; do
    local role=prefill extra=()
    [ "${r#d}" != "$r" ] && { role=decode; extra=("${dargs[@]}"); }
    start $r "$K" serve "$SECRET" --role=$role --tp=${r#?} --tp-size=2 --bootstrap-port="$REG_PORT" \
      --report=$r.json "$@" "${extra[@]}"
  done
}

namespaces() {
  [ "$(id -u)" = 0 ] || { echo "skipped: network namespaces need root"; exit 77; }
  command -v ip >/dev/null || { echo "skipped: iproute2 (ip) is not installed"; exit 77; }
  np=$1; nd=$2
  if ! ip netns add $np 2>/dev/null; then echo "skipped: this machine does not allow network namespaces (ip netns add failed)"; exit 77; fi
  NETNS+=($np)
  # A container may create namespaces but not enter them (ip netns exec
  # remounts / and /sys).
  if ! why=$(ip netns exec $np true 2>&1); then echo "skipped: this machine does not allow entering network namespaces (ip netns exec: $why)"; exit 77; fi
  ip netns add $nd || fail "ip netns add $nd"
  NETNS+=($nd)
  ip -n $np link set lo up && ip -n $nd link set lo up || fail "loopback up"
}

# link NAME SUBNET: a veth pair between the namespaces, p<NAME><pid> with
# SUBNET.1 in prefill's and d<NAME><pid> with SUBNET.2 in decode's.
link() {
  ip link add p$1$$ type veth peer name d$1$$ || { echo "skipped: no veth support"; exit 77; }
  ip link set p$1$$ netns $np && ip link set d$1$$ netns $nd || fail "moving veth $1"
  ip -n $np addr add $2.1/24 dev p$1$$ && ip -n $np link set p$1$$ up || fail "veth $1 up"
  ip -n $nd addr add $2.2/24 dev d$1$$ && ip -n $nd link set d$1$$ up || fail "veth $1 up"
}

check_ok() { # check_ok N RANK...: each rank's report has N successes, no data mismatch
  local n=$1; shift
  for r in "$@"; do
    if [ ! -f $r.json ]; then
      local pid; eval "pid=\${PID_$r:-}"
      local status=unknown; [ -n "$pid" ] && { wait "$pid" 2>/dev/null; status=$?; }
      fail "$r wrote no report (exit status $status)"
    fi
    [ "$(rooms $r.json success)" = "$n" ] || fail "$r: $(rooms $r.json success) of $n rooms succeeded"
    grep -q data_error $r.json && fail "$r: data mismatch"
  done
  return 0
}
check_all_ok() { check_ok "$1" p0 p1 d0 d1; } # the 2P x 2D group

case "$SCENARIO" in
transfer|transfer_tcp|transfer_shm)
  extra=()
  [ "$SCENARIO" = transfer_tcp ] && extra=(--transport=tcp)
  [ "$SCENARIO" = transfer_shm ] && extra=(--transport=shm)
  group "$(port)" --rooms=300 "${extra[@]}"
  for r in p0 p1 d0 d1; do eval "wait_exit \$PID_$r 60" || fail "$r did not finish"; done
  check_all_ok 300
  echo "ok: 300 rooms byte-exact across 2P x 2D processes (${extra[*]:-auto})"
  ;;

transfer_pull)
  # The decode ranks pull: they read the prefill's pages (granted per room
  # on tcp) instead of the prefill writing them; over tcp, then shm.
  for t in tcp shm; do
    rm -f p0.json p1.json d0.json d1.json
    DECODE_ARGS=--pull group "$(port)" --rooms=300 --transport=$t
    for r in p0 p1 d0 d1; do eval "wait_exit \$PID_$r 60" || fail "$r did not finish ($t)"; done
    check_all_ok 300
    grep -q '"direction": "pull"' d0.log || fail "d0 does not say it pulls"
  done
  echo "ok: 300 rooms byte-exact across 2P x 2D processes, decode pulling, over tcp and shm"
  ;;

parallel)
  # Unequal TP sizes with head slicing (2P -> 4D, HND and NHD), then MLA
  # (4P -> 2D: two dummy prefill ranks), every rank its own process; every
  # decode rank checks its heads byte-exact, every rank reports Success.
  deployment() { # deployment NAME PREFILL_TP DECODE_TP ARGS... (PP=N: N prefill stages)
    local name=$1 ptp=$2 dtp=$3; shift 3
    local p; p=$(port); local names=() pp=${PP:-1}
    for ((i = 0; i < ptp * pp; ++i)); do
      local t=$((i % ptp)) s=$((i / ptp)) extra=(--wait-file="$WORK/start_$name")
      [ $i = 0 ] && extra+=(--publish-registry)
      [ "$pp" -gt 1 ] && extra+=(--pp-size=$pp --pp=$s --layers=$((LAYERS / pp)))
      start "${name}_p$i" "$K" serve "$SECRET" --role=prefill --tp=$t --tp-size=$ptp --bootstrap-port="$p" \
        --report="${name}_p$i.json" "$@" "${extra[@]}"
      names+=("${name}_p$i")
      [ $i = 0 ] && { wait_for '"ready"' "${name}_p0.log" 20 || fail "${name}_p0 not ready"; }
    done
    for ((t = 0; t < dtp; ++t)); do
      start "${name}_d$t" "$K" serve "$SECRET" --role=decode --tp=$t --tp-size=$dtp --bootstrap-port="$p" \
        --report="${name}_d$t.json" --wait-file="$WORK/start_$name" "$@"
      names+=("${name}_d$t")
    done
    start_rooms "$name" "${names[@]}"
    for r in "${names[@]}"; do eval "wait_exit \$PID_$r 90" || fail "$r did not finish"; done
    for r in "${names[@]}"; do
      [ "$(rooms $r.json success)" = 150 ] || fail "$r: $(rooms $r.json success) of 150 rooms succeeded"
      grep -q data_error $r.json && fail "$r: data mismatch"
    done
    return 0
  }
  shape=(--rooms=150 --layers=2 --kv-heads=8 --head-dim=32 --tokens-per-page=4 --pages-per-room=2)
  deployment hnd 2 4 "${shape[@]}" --page-order=hnd
  deployment nhd 2 4 "${shape[@]}" --page-order=nhd
  deployment gather 4 2 "${shape[@]}" --page-order=hnd
  deployment mla 4 2 --rooms=150 --layers=2 --mla --head-dim=64 --tokens-per-page=4 --pages-per-room=2
  deployment mla_up 2 4 --rooms=150 --layers=2 --mla --head-dim=64 --tokens-per-page=4 --pages-per-room=2
  # Pipeline-parallel prefill: TP 2 x PP 2 -> TP 2, each stage its 2 of 4 layers.
  LAYERS=4 PP=2 deployment pp 2 2 --rooms=150 --layers=4 --kv-heads=8 --head-dim=32 \
    --tokens-per-page=4 --pages-per-room=2
  # Hybrid-model state beside the pages: Mamba slots, SWA windows.
  deployment mamba 2 2 --rooms=150 --state=mamba
  deployment swa 2 2 "${shape[@]}" --state=swa
  echo "ok: 150 rooms byte-exact each for 2P -> 4D (HND, NHD), 4P -> 2D, MLA 4P -> 2D and 2P -> 4D, TP 2 x PP 2 -> 2D and with Mamba/SWA state, one process per rank"
  ;;

metrics)
  # Prometheus metrics of a 1P x 1D deployment with injected faults, scraped
  # during and after the rooms: valid exposition; counters equal to the
  # reports; faults under cause=fault, origin local on prefill and
  # propagated on decode; /health 503 on decode once prefill is killed.
  p=$(port)
  common=(--bootstrap-port="$p" --rooms=200 --pace-us=3000 --metrics-port=0 --then-rooms=1 \
          --then-wait-file="$WORK/go" --timeout-ms=2000 --wait-file="$WORK/start_metrics")
  start p0 "$K" serve "$SECRET" --role=prefill --publish-registry --report=p0.json \
    --p-transfer=0.1 --fault-seed=5 --log-format=json "${common[@]}"
  wait_for '"ready"' p0.log 20 || fail "p0 not ready"
  start d0 "$K" serve "$SECRET" --role=decode --report=d0.json "${common[@]}"
  start_rooms metrics p0 d0
  mp=$(sed -n 's/.*"metrics": "\([0-9.]*:[0-9]*\)".*/\1/p' p0.log | head -n 1)
  md=$(sed -n 's/.*"metrics": "\([0-9.]*:[0-9]*\)".*/\1/p' d0.log | head -n 1)
  [ -n "$mp" ] && [ -n "$md" ] || fail "no metrics address in the ready lines"
  sleep 0.3
  curl -sf "http://$mp/metrics" > during.txt || fail "no /metrics during the rooms"
  python3 "$HERE/metrics_check.py" during.txt || fail "bad exposition during the rooms"
  grep -q '^kvroom_up{rank="0",role="prefill"} 1' during.txt || fail "prefill not up: $(head during.txt)"
  for r in p0 d0; do wait_for batch_done $r.log 60 || fail "$r did not finish its rooms"; done
  sleep 0.5
  curl -sf "http://$mp/metrics" > p0.txt || fail "no prefill /metrics after the rooms"
  curl -sf "http://$md/metrics" > d0.txt || fail "no decode /metrics after the rooms"
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$md/health")" = 200 ] || fail "decode not healthy"
  # A client flooding the metrics port with idle connections makes the rank
  # hold a bounded number of them; once it lets go, scrapes are served again.
  python3 - "$PID_d0" "$md" <<'PY' || fail "metrics port flood"
import os, socket, sys, time, urllib.request
pid, addr = sys.argv[1], sys.argv[2]
host, port = addr.rsplit(":", 1)
fds = lambda: len(os.listdir(f"/proc/{pid}/fd"))
before = fds()
held = []
# As fast as the server takes them, for 3 s: an unbounded server takes
# them all; a bounded one stops accepting, and connects wait in vain.
until = time.monotonic() + 3
while len(held) < 400 and time.monotonic() < until:
    s = socket.socket()
    s.settimeout(0.2)
    try:
        s.connect((host, int(port)))
    except OSError:
        pass
    held.append(s)
time.sleep(0.5)
during = fds()
for s in held:
    s.close()
assert during - before <= 40, f"{len(held)} idle connections made the rank hold {during - before} more fds"
deadline = time.monotonic() + 20
while True:
    try:
        urllib.request.urlopen(f"http://{addr}/metrics", timeout=3).read()
        break
    except OSError:
        assert time.monotonic() < deadline, "no scrape served after the flood"
        time.sleep(0.2)
print(f"ok: {len(held)} idle metrics connections held {during - before} more fds ({before} before); "
      f"scraped {time.monotonic() - deadline + 20:.1f} s after")
PY
  "$K" top --count=1 "$mp" "$md" > top.txt || fail "kvroom top failed: $(cat top.txt)"
  grep -q " prefill " top.txt && grep -q " decode " top.txt && grep -q "local/fault" top.txt \
    || fail "kvroom top misses a rank or the faults: $(cat top.txt)"
  # Its log is JSON lines, each failure a structured event.
  python3 - p0.log <<'PY' || fail "prefill's JSON log lines: $(tail -n 3 p0.log)"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
failed = [l for l in lines if l.get("event") == "room_failed"]
assert failed, "no room_failed event"
for e in failed:
    for key in ("time", "level", "room", "rank", "rank_id", "origin_rank", "propagated", "cause", "reason"):
        assert key in e, f"{key} missing in {e}"
    assert e["propagated"] is False and e["origin_rank"] == e["rank_id"], e
assert any(e["cause"] == "fault" for e in failed), failed[:2]
print(f"ok: {len(lines)} JSON log lines, {len(failed)} room_failed events")
PY
  kill -9 "$PID_p0"
  ok=0
  for _ in $(seq 60); do
    [ "$(curl -s -o health.json -w '%{http_code}' "http://$md/health")" = 503 ] && { ok=1; break; }
    sleep 0.05
  done
  [ $ok = 1 ] || fail "decode /health stayed ready after its peer was killed: $(cat health.json)"
  touch "$WORK/go"
  wait_exit "$PID_d0" 30 || fail "d0 did not finish"
  # The killed prefill wrote no report: the decode one says what the rooms did;
  # the prefill's counters are checked against the decode's outcomes of its
  # own faults.
  python3 "$HERE/metrics_check.py" d0.txt d0.json 200 propagated || fail "decode metrics differ"
  inj=$(grep -c 'cause="fault"} [1-9]' p0.txt || true)
  [ "$inj" -ge 1 ] || fail "prefill counted no fault: $(grep fault p0.txt)"
  pf=$(awk '/^kvroom_failures_total.*origin="local",cause="fault"/ {print $2}' p0.txt)
  df=$(awk '/^kvroom_failures_total.*origin="propagated",cause="fault"/ {print $2}' d0.txt)
  [ "$pf" = "$df" ] || fail "prefill counted $pf faults, decode learned $df"
  echo "ok: metrics scraped during and after 200 rooms; $pf injected faults counted as local on prefill and propagated on decode; /health 503 after the peer was killed"
  ;;

sigkill|sigkill_pull)
  # Phase 1 is paced so the kill lands mid-transfer; phase 2 runs after the
  # killed rank restarted and registered again (the registry lives in p0).
  # sigkill_pull: the decode ranks pull, so the kill lands mid-read.
  [ "$SCENARIO" = sigkill_pull ] && DECODE_ARGS=--pull
  p=$(port)
  group "$p" --rooms=300 --pace-us=4000 --timeout-ms=1500 --then-rooms=40 --then-wait-file="$WORK/go"
  for r in p0 p1 d0 d1; do wait_for '"ready"' $r.log 20 || fail "$r not ready"; done
  sleep 0.6
  kill -9 "$PID_p1"
  killed=$(now_ms)
  for r in p0 d0 d1; do wait_for batch_done $r.log 60 || fail "$r did not finish phase 1"; done
  start p1 "$K" serve "$SECRET" --role=prefill --tp=1 --tp-size=2 --bootstrap-port="$p" --report=p1.json \
    --first-room=301 --rooms=40 --timeout-ms=1500
  wait_for '"ready"' p1.log 20 || fail "restarted p1 not ready"
  touch "$WORK/go"
  for r in p0 p1 d0 d1; do eval "wait_exit \$PID_$r 60" || fail "$r did not finish phase 2"; done
  worst=0
  for r in p0 d0 d1; do
    lost=$(grep '"reason": "rank prefill\[dp0,tp1\]#1 at 127.0.0.1:[0-9]* lost' $r.json | grep -c '"origin_rank": 1, "from_another_rank": true')
    [ "$lost" -gt 0 ] || fail "$r: no room failed with the lost rank as origin"
    # Rooms in flight fail on detection; rooms opened later fail at once
    # too (the lost rank is remembered): the first failure shows detection.
    first=$(grep 'lost: ' $r.json | sed 's/.*"at_ms": \([0-9]*\).*/\1/' | sort -n | head -n 1)
    d=$((first - killed)); [ $d -gt $worst ] && worst=$d
    ok2=$(awk -F'"room": ' 'NF>1 { split($2, a, ","); if (a[1] > 300 && $0 ~ /"success"/) n++ } END { print n+0 }' $r.json)
    [ "$ok2" = 40 ] || fail "$r: $ok2 of 40 rooms succeeded after the restart"
  done
  [ "$(rooms p1.json success)" = 40 ] || fail "restarted p1: $(rooms p1.json success) of 40 succeeded"
  # Detection must be prompt, not a timeout (the benchmark measures it).
  [ $worst -lt 1000 ] || fail "rooms failed ${worst} ms after the kill"
  echo "ok: SIGKILL of prefill tp1${DECODE_ARGS:+ (decode pulling)}: every survivor failed its rooms ${worst} ms after the kill at the latest (origin 1, propagated); after the restart 40 rooms succeeded on all 4 ranks"
  ;;

sigkill_decode)
  # A decode TP rank is SIGKILLed while every room of the batch waits, on
  # the decode side, for its scheduler's init (60 s away, past the test's
  # bound). The decode ranks never link to each other; d0 hears of d1 from
  # the registry and its rooms depend on d1: they fail now, with d1 as the
  # origin on every survivor, not at their init or deadlines (60 s too).
  p=$(port)
  DECODE_ARGS=--init-delay-ms=60000 group "$p" --rooms=40 --pace-us=4000 --timeout-ms=60000
  for r in p0 p1 d0 d1; do wait_for '"ready"' $r.log 20 || fail "$r not ready"; done
  sleep 0.5
  kill -9 "$PID_d1"
  for r in p0 p1 d0; do eval "wait_exit \$PID_$r 30" || fail "$r still waits 30 s after the kill: its rooms did not hear d1's loss"; done
  for r in p0 p1 d0; do
    total=$(grep -c '"state": ' $r.json)
    lost=$(grep '"reason": "rank decode\[dp0,tp1\]#65537' $r.json | grep -c '"origin_rank": 65537')
    [ "$total" -gt 0 ] && [ "$lost" = "$total" ] || fail "$r: $lost of $total rooms failed with the lost decode rank as origin"
  done
  echo "ok: SIGKILL of decode tp1 while its group's rooms waited for init: every room failed at once on p0, p1 and d0, d1 the origin"
  ;;

sigstop)
  p=$(port)
  group "$p" --rooms=300 --pace-us=4000 --timeout-ms=1500 --connection-timeout-ms=1000
  for r in p0 p1 d0 d1; do wait_for '"ready"' $r.log 20 || fail "$r not ready"; done
  sleep 0.6
  kill -STOP "$PID_d1"
  stopped=$(now_ms)
  for r in p0 p1 d0; do wait_for batch_done $r.log 60 || fail "$r did not finish"; done
  kill -9 "$PID_d1"
  for r in p0 p1 d0; do eval "wait_exit \$PID_$r 30" || fail "$r did not exit"; done
  first=999999
  for r in p0 p1 d0; do
    grep -q 'rank decode\[dp0,tp1\]#65537 at 127.0.0.1:[0-9]* lost' $r.json || fail "$r: no room failed because decode tp1 froze"
    at=$(grep 'lost: ' $r.json | head -n 1 | sed 's/.*"at_ms": \([0-9]*\).*/\1/')
    d=$((at - stopped)); [ $d -lt $first ] && first=$d
  done
  [ $first -lt 2500 ] || fail "frozen peer detected only after ${first} ms"
  echo "ok: SIGSTOP of decode tp1 detected by every survivor, first rooms failed ${first} ms after the stop"
  ;;

malformed)
  # The first 300 rooms run while the churn starts; the ranks then wait for
  # $WORK/go, which is written only after both churn loops, so they outlive
  # them however slow this machine forks; 100 more rooms after the churn show
  # the rank still serves.
  group "$(port)" --rooms=300 --pace-us=5000 --then-rooms=100 --then-wait-file="$WORK/go"
  for r in p0 p1 d0 d1; do wait_for '"ready"' $r.log 20 || fail "$r not ready"; done
  addr=$(sed -n 's/.*"tcp": "\([0-9.]*:[0-9]*\)".*/\1/p' d0.log | head -n 1)
  host=${addr%:*}; tport=${addr#*:}
  # Garbage, then a well-formed header whose write targets unregistered
  # memory (address 0x1000), then a header announcing more writes than allowed.
  exec 3<>/dev/tcp/$host/$tport && printf 'GET / HTTP/1.0\r\n\r\n' >&3 && exec 3>&-
  exec 3<>/dev/tcp/$host/$tport && printf 'MRVK\x01\x00\x00\x00\x01\0\0\0\0\0\0\0\x07\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\0\x10\0\0\0\0\0\0\0\x00\x10\0\0\0\0\0\0\x10\0\0\0\0\0\0\0' >&3 && exec 3>&-
  exec 3<>/dev/tcp/$host/$tport && printf 'MRVK\x01\x00\x00\x00\x01\0\0\0\0\0\0\0\x07\0\0\0\0\0\0\0\xff\xff\xff\xff\0\0\0\0' >&3 && exec 3>&-
  # Connect/close churn while the rooms run: the rank's threads stay flat.
  threads_before=$(ps -o nlwp= -p "$PID_d0" | tr -d ' ')
  for i in $(seq 1 2000); do (exec 3<>/dev/tcp/$host/$tport) 2>/dev/null; done
  sleep 0.5
  threads_after=$(ps -o nlwp= -p "$PID_d0" | tr -d ' ')
  [ "$threads_after" -le $((threads_before + 2)) ] || fail "d0 went from $threads_before to $threads_after threads after 2000 connect/close cycles"
  # The same on its control endpoint (CAF's middleman behind the gate).
  ctl=$(sed -n 's/.*"control": "\([0-9.]*:[0-9]*\)".*/\1/p' d0.log | head -n 1)
  fds_before=$(ls /proc/$PID_d0/fd | wc -l)
  for i in $(seq 1 2000); do (exec 3<>/dev/tcp/${ctl%:*}/${ctl#*:}) 2>/dev/null; done
  sleep 0.5
  ctl_threads=$(ps -o nlwp= -p "$PID_d0" | tr -d ' ')
  fds_after=$(ls /proc/$PID_d0/fd | wc -l)
  [ -n "$ctl_threads" ] || fail "d0 ended during the control churn"
  [ "$ctl_threads" -le $((threads_before + 2)) ] || fail "d0 went to $ctl_threads threads after 2000 control connect/close cycles"
  [ "$fds_after" -le $((fds_before + 2)) ] || fail "d0 went from $fds_before to $fds_after fds after 2000 control connect/close cycles"
  # A silent client is closed at the handshake deadline (1 s), unread.
  t0=$(now_ms)
  timeout 10 bash -c "exec 3<>/dev/tcp/$host/$tport; cat <&3 > /dev/null" || fail "a silent client was not closed"
  silent=$(( $(now_ms) - t0 ))
  [ $silent -lt 2500 ] || fail "a silent client was held ${silent} ms"
  touch "$WORK/go"
  for r in p0 p1 d0 d1; do eval "wait_exit \$PID_$r 60" || fail "$r did not finish"; done
  check_all_ok 400
  grep -q "refuses a connection from [0-9.]*: no membership proof" d0.log || fail "d0 did not report the unauthenticated clients"
  echo "ok: garbage and forged batches from clients without a membership proof refused unread; 2000 connect/close cycles left d0 at $threads_after threads (was $threads_before), 2000 more on its control endpoint at $ctl_threads threads and $fds_after fds (was $fds_before); a silent client closed after ${silent} ms; the rank kept serving, 400 rooms byte-exact (100 after the churn)"
  ;;

netns)
  namespaces kvrp$$ kvrd$$
  link v 10.213.$(( $$ % 250 ))
  pa=10.213.$(( $$ % 250 )).1; da=10.213.$(( $$ % 250 )).2
  p=$(port)
  start p0 ip netns exec $np "$K" serve "$SECRET" --role=prefill --tp=0 --tp-size=2 --bootstrap-host=$pa --bootstrap-port=$p --publish-registry --tcp-host=$pa --transport=tcp --rooms=200 --report=p0.json
  start p1 ip netns exec $np "$K" serve "$SECRET" --role=prefill --tp=1 --tp-size=2 --bootstrap-host=$pa --bootstrap-port=$p --tcp-host=$pa --transport=tcp --rooms=200 --report=p1.json
  start d0 ip netns exec $nd "$K" serve "$SECRET" --role=decode --tp=0 --tp-size=2 --bootstrap-host=$pa --bootstrap-port=$p --tcp-host=$da --transport=tcp --rooms=200 --report=d0.json
  start d1 ip netns exec $nd "$K" serve "$SECRET" --role=decode --tp=1 --tp-size=2 --bootstrap-host=$pa --bootstrap-port=$p --tcp-host=$da --transport=tcp --rooms=200 --report=d1.json
  for r in p0 p1 d0 d1; do eval "wait_exit \$PID_$r 90" || fail "$r did not finish"; done
  check_all_ok 200
  echo "ok: prefill in $np ($pa) and decode in $nd ($da), joined by a veth pair: 200 rooms byte-exact over tcp"
  ;;

paths)
  # One prefill and one decode process, each on two loopback addresses (two
  # data paths). Every batch prefill sends on 127.0.0.2 fails: every room
  # still succeeds byte-exact, and prefill's metrics show that path resting
  # and the batches it moved. Then every path broken: every room fails,
  # naming both paths, with prefill as the one origin on both ranks.
  run_pair() { # run_pair NAME FAULT_PATH ROOMS
    local name=$1 fault=$2 n=$3 p; p=$(port)
    local common=(--bootstrap-port="$p" --transport=tcp --tcp-host=127.0.0.1,127.0.0.2
                  --rooms="$n" --metrics-port=0 --timeout-ms=3000 --then-rooms=1
                  --then-wait-file="$WORK/go_$name" --wait-file="$WORK/start_$name")
    start "${name}_p" "$K" serve "$SECRET" --role=prefill --publish-registry \
      --report="${name}_p.json" --fault-path="$fault" "${common[@]}"
    wait_for '"ready"' "${name}_p.log" 20 || fail "${name}_p not ready"
    start "${name}_d" "$K" serve "$SECRET" --role=decode --report="${name}_d.json" "${common[@]}"
    start_rooms "$name" "${name}_p" "${name}_d"
    for r in "${name}_p" "${name}_d"; do wait_for batch_done $r.log 90 || fail "$r did not finish its rooms"; done
    local m; m=$(sed -n 's/.*"metrics": "\([0-9.]*:[0-9]*\)".*/\1/p' "${name}_p.log" | head -n 1)
    curl -sf "http://$m/metrics" > "${name}_p.txt" || fail "no prefill /metrics"
    python3 "$HERE/metrics_check.py" "${name}_p.txt" || fail "bad exposition"
    touch "$WORK/go_$name"
    for r in "${name}_p" "${name}_d"; do eval "wait_exit \$PID_$r 60" || fail "$r did not finish"; done
  }
  value() { # value FILE SAMPLE-PREFIX: the sample's value (0 when absent)
    awk -v s="$2" 'index($0, s) == 1 { print int($NF); found = 1 } END { if (!found) print 0 }' "$1" | head -n 1
  }
  run_pair one 127.0.0.2: 200
  for r in one_p one_d; do
    [ "$(rooms $r.json success)" = 201 ] || fail "$r: $(rooms $r.json success) of 201 rooms succeeded with one path broken"
    grep -q data_error $r.json && fail "$r: data mismatch"
  done
  retries=$(value one_p.txt 'kvroom_path_retries_total{rank="0",role="prefill",transport="tcp"}')
  resting=$(( $(value one_p.txt 'kvroom_paths{rank="0",role="prefill",state="resting"}') \
            + $(value one_p.txt 'kvroom_paths{rank="0",role="prefill",state="probing"}') ))
  healthy=$(value one_p.txt 'kvroom_paths{rank="0",role="prefill",state="healthy"}')
  [ "$retries" -gt 0 ] || fail "no batch moved to another path: $(grep path one_p.txt)"
  [ "$resting" -ge 1 ] && [ "$healthy" -ge 1 ] || fail "paths not as expected: $(grep kvroom_paths one_p.txt)"
  run_pair both tcp 20
  for r in both_p both_d; do
    [ "$(rooms $r.json failed)" = 21 ] || fail "$r: $(rooms $r.json failed) of 21 rooms failed with both paths broken"
  done
  python3 - both_p.json both_d.json <<'PY' || fail "failures with both paths broken"
import json, sys
p = json.load(open(sys.argv[1])); d = json.load(open(sys.argv[2]))
pid = p["rank_id"]
for rep, propagated in ((p, False), (d, True)):
    for r in rep["rooms"]:
        assert r["origin_rank"] == pid, r
        assert r["from_another_rank"] == propagated, r
        assert "no path left" in r["reason"] and "127.0.0.1:" in r["reason"] and "127.0.0.2:" in r["reason"], r
PY
  echo "ok: one of two paths broken: 201 rooms byte-exact, $retries batches moved, the broken path rests; both broken: 21 rooms failed naming both paths, one origin"
  ;;

netns_paths)
  # Prefill in one namespace, decode in another, joined by three veth pairs:
  # one for the control plane, two for data (two paths). One data link is
  # taken down mid-run and brought back: every room succeeds, the path
  # rests and returns. Then both data links go down: the next rooms fail
  # within their deadline, naming both paths.
  namespaces kvpp$$ kvpd$$
  net=$(( $$ % 250 ))
  link c 10.211.$net; link a 10.212.$net; link b 10.213.$net
  pc=10.211.$net.1; dc=10.211.$net.2
  pdata=10.212.$net.1,10.213.$net.1; ddata=10.212.$net.2,10.213.$net.2
  p=$(port)
  # serve's defaults but for the rest: a dead path's batches move after a
  # quarter of --timeout-ms (1.25 s), well inside the room's deadline.
  common=(--bootstrap-host=$pc --bootstrap-port=$p --transport=tcp --rooms=2500 --pace-us=4000
          --timeout-ms=5000 --path-rest-ms=1000 --then-rooms=20 --then-wait-file="$WORK/go"
          --wait-file="$WORK/start_netns_paths")
  start p0 ip netns exec $np "$K" serve "$SECRET" --role=prefill --publish-registry --tcp-host=$pdata \
    --control-host=$pc --metrics-host=$pc --metrics-port=0 --report=p0.json "${common[@]}"
  wait_for '"ready"' p0.log 20 || fail "p0 not ready"
  start d0 ip netns exec $nd "$K" serve "$SECRET" --role=decode --tcp-host=$ddata --control-host=$dc \
    --report=d0.json "${common[@]}"
  start_rooms netns_paths p0 d0
  m=$(sed -n 's/.*"metrics": "\([0-9.]*:[0-9]*\)".*/\1/p' p0.log | head -n 1)
  scrape() { ip netns exec $np curl -sf "http://$m/metrics"; }
  paths_in() { scrape | awk -v s="kvroom_paths{rank=\"0\",role=\"prefill\",state=\"$1\"}" 'index($0, s) == 1 { print int($NF) }'; }
  sleep 2
  down_at=$(now_ms)
  ip -n $np link set pb$$ down || fail "link b down"
  rested=0
  for _ in $(seq 1 40); do
    [ "$(( $(paths_in resting) + $(paths_in probing) ))" -ge 1 ] && { rested=1; break; }
    sleep 0.1
  done
  sleep 2
  ip -n $np link set pb$$ up || fail "link b up"
  up_at=$(now_ms)
  back=0
  for _ in $(seq 1 100); do
    [ "$(paths_in healthy)" = 2 ] && { back=1; break; }
    sleep 0.1
  done
  [ "$rested" = 1 ] || fail "the path on the downed link never rested"
  [ "$back" = 1 ] || fail "the path did not return after its link came back: $(scrape | grep kvroom_paths)"
  for r in p0 d0; do wait_for batch_done $r.log 90 || fail "$r did not finish its rooms"; done
  ip -n $np link set pa$$ down && ip -n $np link set pb$$ down || fail "links down"
  t0=$(now_ms)
  touch "$WORK/go"
  for r in p0 d0; do eval "wait_exit \$PID_$r 60" || fail "$r did not finish"; done
  took=$(( $(now_ms) - t0 ))
  # The reports hold both phases: rooms 1-2500 with one link down for a
  # while, then 20 with both down.
  python3 - p0.json d0.json "$down_at" "$up_at" <<'PY' || fail "the rooms' outcomes"
import json, sys
p = json.load(open(sys.argv[1])); d = json.load(open(sys.argv[2]))
down, up = int(sys.argv[3]), int(sys.argv[4])
pid = p["rank_id"]
for rep in (p, d):
    first = [r for r in rep["rooms"] if r["room"] <= 2500]
    bad = [r for r in first if r["state"] != "success" or "data_error" in r]
    assert len(first) == 2500 and not bad, f"{rep['rank']}: {len(bad)} of {len(first)} rooms not byte-exact: {bad[:3]}"
def rate(a, b):
    n = sum(1 for r in p["rooms"] if a <= r["at_ms"] < b)
    return n * 1000.0 / max(b - a, 1)
print(f"rooms/s: before {rate(down - 1500, down):.0f}, first 500 ms down {rate(down, down + 500):.0f}, "
      f"rest of down {rate(down + 500, up):.0f}, after {rate(up + 1000, up + 2500):.0f}")
def lat(a, b):
    xs = sorted(r["latency_us"] for r in p["rooms"] if a <= r["opened_ms"] < b and r["room"] <= 2500)
    return (xs[len(xs) // 2] / 1000, xs[-1] / 1000) if xs else (0, 0)
print("room latency ms (median, max): before %.1f, %.1f; opened in the 500 ms around the link's "
      "loss %.1f, %.1f" % (*lat(down - 1500, down - 500), *lat(down - 250, down + 250)))
for rep, propagated in ((p, False), (d, True)):
    late = [r for r in rep["rooms"] if r["room"] > 2500]
    assert len(late) == 20, len(late)
    for r in late:
        assert r["state"] == "failed", r
        assert r["origin_rank"] == pid and r["from_another_rank"] == propagated, r
        assert "no path left" in r["reason"] and "10.212." in r["reason"] and "10.213." in r["reason"], r
PY
  echo "ok: one of two data links down for 2 s: 2500 rooms byte-exact, the path rested and came back; both down: 20 rooms failed naming both paths (${took} ms with the hold)"
  ;;

registry_restart)
  # A standalone registry killed and restarted mid-run: rooms between live
  # ranks keep succeeding while it is away, every rank registers again.
  registry_group "" --rooms=400 --pace-us=5000 --timeout-ms=1500 --then-rooms=40 --then-wait-file="$WORK/go"
  p=$REG_PORT
  for r in p0 p1 d0 d1; do wait_for '"ready"' $r.log 20 || fail "$r not ready"; done
  sleep 0.5
  kill -9 "$PID_reg"
  sleep 1
  start reg2 "$K" registry "$SECRET" --bootstrap-port="$p"
  wait_for '"ready"' reg2.log 20 || fail "restarted registry not ready"
  for r in p0 p1 d0 d1; do
    wait_for 'bootstrap registry .* lost' $r.log 10 || fail "$r did not notice the registry's loss"
    wait_for 'registered again with the bootstrap registry' $r.log 10 || fail "$r did not register again"
  done
  for r in p0 p1 d0 d1; do wait_for batch_done $r.log 60 || fail "$r did not finish phase 1"; done
  touch "$WORK/go"
  for r in p0 p1 d0 d1; do eval "wait_exit \$PID_$r 60" || fail "$r did not finish"; done
  check_all_ok 440
  echo "ok: standalone registry SIGKILLed and restarted mid-run: all 440 rooms byte-exact on every rank, all 4 ranks registered again"
  ;;

registry_false_down)
  # A registry stalled past its connection timeout drops live ranks and
  # tells the others they are lost. d0 never links to d1 (decode TP ranks
  # of a group do not), so the registry's word is all it has of d1: it
  # checks it (d1's endpoint answers, d1 links) and fails nothing.
  registry_group "--chaos-drop-rank=65537 --chaos-drop-ms=1500" --rooms=600 --pace-us=5000 --timeout-ms=1500
  for r in p0 p1 d0 d1; do eval "wait_exit \$PID_$r 60" || fail "$r did not finish"; done
  # The report reached d0 while rooms ran (it says so when it clears d1).
  grep -q 'reported rank 65537 lost, but it answers' d0.log || fail "d0 did not check the registry's word about d1"
  check_all_ok 600
  echo "ok: the registry reported live decode tp1 lost mid-run; d0, never linked to it, checked that word and failed none of 600 rooms"
  ;;

registry_false_down_kill)
  # The registry reports live decode tp1 lost while every room waits for
  # its decode init (60 s away); d0 checks, finds it alive and fails
  # nothing. Then d1 is SIGKILLed for real: every room still fails at once
  # on p0, p1 and d0, with d1 the origin (a report cleared is no blind spot).
  DECODE_ARGS=--init-delay-ms=60000 registry_group "--chaos-drop-rank=65537 --chaos-drop-ms=1000" \
    --rooms=40 --pace-us=4000 --timeout-ms=60000
  wait_for 'reported rank 65537 lost, but it answers' d0.log 20 || fail "d0 did not check the registry's word about d1"
  sleep 0.2
  for r in p0 p1 d0 d1; do kill -0 "$(eval echo \$PID_$r)" || fail "$r ended before the kill"; done
  killed=$(now_ms) # taken before the kill: no failure of it can precede it
  kill -9 "$PID_d1"
  for r in p0 p1 d0; do eval "wait_exit \$PID_$r 30" || fail "$r still waits 30 s after the kill: its rooms did not hear d1's loss"; done
  for r in p0 p1 d0; do
    total=$(grep -c '"state": ' $r.json)
    lost=$(grep '"reason": "rank decode\[dp0,tp1\]#65537' $r.json | grep -c '"origin_rank": 65537')
    [ "$total" = 40 ] && [ "$lost" = "$total" ] || fail "$r: $lost of $total rooms failed with the lost decode rank as origin"
    grep -q 'chaos: dropped' $r.json && fail "$r: a room failed on the registry's false word"
    first=$(grep -o '"at_ms": [0-9]*' $r.json | sed 's/.* //' | sort -n | head -n 1)
    [ "$first" -ge "$killed" ] || fail "$r: a room failed at $first ms, before the kill at $killed ms"
  done
  echo "ok: a false report of decode tp1's loss failed nothing; its SIGKILL then failed all 40 rooms on p0, p1 and d0 at once, d1 the origin"
  ;;

dp_groups)
  # Two DP groups, the registry in prefill dp0. Killing that process fails
  # only its own group's rooms; restarted (the registry with it), new rooms
  # succeed on every rank within 2 s.
  p=$(port)
  common=(--tp-size=1 --bootstrap-port="$p" --rooms=300 --pace-us=4000 --timeout-ms=1500
          --then-rooms=40 --then-wait-file="$WORK/go")
  start a0 "$K" serve "$SECRET" --role=prefill --dp=0 --publish-registry --report=a0.json "${common[@]}"
  start b0 "$K" serve "$SECRET" --role=decode --dp=0 --report=b0.json "${common[@]}"
  start a1 "$K" serve "$SECRET" --role=prefill --dp=1 --first-room=100001 --report=a1.json "${common[@]}"
  start b1 "$K" serve "$SECRET" --role=decode --dp=1 --first-room=100001 --report=b1.json "${common[@]}"
  for r in a0 b0 a1 b1; do wait_for '"ready"' $r.log 20 || fail "$r not ready"; done
  sleep 0.6
  kill -9 "$PID_a0"
  for r in b0 a1 b1; do wait_for batch_done $r.log 60 || fail "$r did not finish phase 1"; done
  start a0 "$K" serve "$SECRET" --role=prefill --dp=0 --publish-registry --report=a0.json \
    --tp-size=1 --bootstrap-port="$p" --first-room=301 --rooms=40 --timeout-ms=1500 --wait-file="$WORK/go"
  wait_for '"ready"' a0.log 20 || fail "restarted a0 not ready"
  back=$(now_ms)
  for r in b0 a1 b1; do
    wait_for 'registered again with the bootstrap registry' $r.log 5 || fail "$r did not register with the restarted registry"
  done
  rejoined=$(( $(now_ms) - back ))
  [ $rejoined -lt 2000 ] || fail "ranks registered again only ${rejoined} ms after the registry returned"
  go=$(now_ms)
  touch "$WORK/go"
  for r in a0 b0 a1 b1; do eval "wait_exit \$PID_$r 60" || fail "$r did not finish phase 2"; done
  for r in a1 b1; do
    [ "$(rooms $r.json success)" = 340 ] || fail "$r (dp1): $(rooms $r.json success) of 340 rooms succeeded; the other group's loss reached it"
    grep -q data_error $r.json && fail "$r: data mismatch"
  done
  [ "$(rooms a0.json success)" = 40 ] || fail "restarted a0: $(rooms a0.json success) of 40 succeeded"
  ok2=$(awk -F'"room": ' 'NF>1 { split($2, a, ","); if (a[1] > 300 && a[1] < 100000 && $0 ~ /"success"/) n++ } END { print n+0 }' b0.json)
  [ "$ok2" = 40 ] || fail "b0: $ok2 of 40 rooms succeeded after the restart"
  for r in a0 b0 a1 b1; do
    first=$(awk -F'"at_ms": ' 'NF>1 && /"success"/ { split($2, a, "[,}]"); print a[1] }' $r.json | sort -n | awk -v g=$go '$1 >= g' | head -n 1)
    [ -n "$first" ] && [ $((first - go)) -lt 2000 ] || fail "$r: no room succeeded within 2 s of the restart"
  done
  echo "ok: 2 DP groups; the registry's host (prefill dp0) SIGKILLed: dp1 lost none of its 340 rooms; restarted, every rank registered again ${rejoined} ms later and all 40 new rooms succeeded on all 4 ranks"
  ;;

auth)
  # Wrong or missing secrets, a live rank's id, a layout that does not fit,
  # and a stranger's forged control messages: all refused, nothing changed.
  p=$(port)
  group "$p" --rooms=300 --pace-us=30000
  for r in p0 p1 d0 d1; do wait_for '"ready"' $r.log 20 || fail "$r not ready"; done
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > other && chmod 600 other
  try() { # try NAME EXPECTED_TEXT ARGS... : must exit non-zero saying EXPECTED_TEXT
    local name=$1 want=$2; shift 2
    timeout 30 "$@" --bootstrap-port="$p" --rooms=1 > $name.log 2>&1 && fail "$name was accepted"
    grep -q "$want" $name.log || fail "$name: no '$want' in its error: $(tail -n 3 $name.log)"
  }
  try wrong "failed to prove membership" "$K" serve --secret-file=other --role=decode --dp=3 --tp=0 --tp-size=2
  try insecure "failed to prove membership" "$K" serve --insecure --role=decode --dp=3 --tp=0 --tp-size=2
  try nosecret "no --secret-file" "$K" serve --role=decode --dp=3 --tp=0 --tp-size=2
  try thief "is held by the live" "$K" serve "$SECRET" --role=decode --tp=0 --tp-size=2
  try squatter "takes the place of the live" "$K" serve "$SECRET" --role=decode --tp=0 --tp-size=2 --rank-id=4242
  try layout "KV buffers" "$K" serve "$SECRET" --role=decode --dp=3 --tp=0 --tp-size=2 --page-bytes=8192
  try tpsize "TP size" "$K" serve "$SECRET" --role=decode --dp=3 --tp=0 --tp-size=1
  # Declared beside undeclared ranks whose pages are not that model's.
  try declared "declare a parallel layout, .* and what it holds is not that model's" "$K" serve "$SECRET" --role=decode --dp=3 --tp=0 --tp-size=2 --kv-heads=8
  try badlayout "do not split evenly" "$K" serve "$SECRET" --role=decode --dp=3 --tp=0 --tp-size=2 --kv-heads=3
  [ -n "$STRANGER" ] || fail "no stranger client given"
  ctl=()
  for r in p0 p1 d0 d1; do ctl+=("$(sed -n 's/.*"control": "\([0-9.]*:[0-9]*\)".*/\1/p' $r.log | head -n 1)"); done
  # The registry too.
  ctl+=("127.0.0.1:$p")
  # A CAF client without the secret reaches no control endpoint (its forged
  # control messages never get in; the managers' own checks are tested in
  # engine_test).
  timeout 30 "$STRANGER" 300 "${ctl[@]}" > stranger.log 2>&1 && fail "a stranger reached a control endpoint: $(cat stranger.log)"
  [ "$(grep -c unreachable stranger.log)" = 5 ] || fail "the stranger was not refused by all 5 endpoints: $(cat stranger.log)"
  # Raw connections: silent, trickling, a header announcing 4 GiB. Each
  # closed within the gate's deadline, and no rank's memory grows.
  rss() { awk '/VmRSS/ { print $2 }' /proc/$1/status; }
  before=$(rss "$PID_p0")
  pids=()
  for c in "${ctl[@]}"; do
    timeout 30 "$STRANGER" --raw "$c" > "raw-${c##*:}.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || fail "hostile raw connections: $(cat raw-*.log)"
  done
  after=$(rss "$PID_p0")
  [ $((after - before)) -lt 65536 ] || fail "p0 grew from ${before} to ${after} KiB under hostile connections"
  for r in p0 p1 d0 d1; do eval "wait_exit \$PID_$r 60" || fail "$r did not finish"; done
  check_all_ok 300
  for r in p0 p1 d0 d1; do
    grep -q "control endpoint refuses a connection from " $r.log || fail "$r did not report the refused connections"
  done
  last=$(sed -n 's/.*the last after \([0-9]*\) ms/\1/p' raw-*.log | sort -n | tail -n 1)
  echo "ok: wrong secret, --insecure, no secret, a live rank's id, a live rank's place, an unfit layout and TP size all refused with the reason; a CAF client without the secret reached none of the 5 control endpoints; 82 hostile raw connections per endpoint (silent, trickling, a 4 GiB header) all closed within ${last} ms, p0 ${before} -> ${after} KiB; 300 rooms byte-exact"
  ;;

tls)
  # Control-plane TLS: certificates of one CA on every node. The deployment
  # works; a rank without TLS, or with a certificate of another CA, cannot
  # join; a client that does not speak TLS reaches no manager.
  command -v openssl >/dev/null || { echo "skipped: the openssl tool is not installed"; exit 77; }
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj "/CN=kvroom-test-ca" 2>/dev/null || fail "making a CA"
  for n in node other; do
    openssl req -newkey rsa:2048 -nodes -keyout $n.key -out $n.csr -subj "/CN=$n" 2>/dev/null
  done
  openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out node.pem -days 2 2>/dev/null || fail "signing"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout rogue-ca.key -out rogue-ca.pem -days 2 -subj "/CN=rogue-ca" 2>/dev/null
  openssl x509 -req -in other.csr -CA rogue-ca.pem -CAkey rogue-ca.key -CAcreateserial -out other.pem -days 2 2>/dev/null
  TLS=(--tls-certificate=node.pem --tls-key=node.key --tls-cafile=ca.pem)
  p=$(port)
  start reg "$K" registry "$SECRET" "${TLS[@]}" --bootstrap-port="$p"
  wait_for '"ready"' reg.log 20 || fail "registry not ready"
  start p0 "$K" serve "$SECRET" "${TLS[@]}" --role=prefill --bootstrap-port="$p" --rooms=200 --report=p0.json --hold-ms=15000
  start d0 "$K" serve "$SECRET" "${TLS[@]}" --role=decode --bootstrap-port="$p" --rooms=200 --report=d0.json --hold-ms=15000
  for r in p0 d0; do wait_for '"ready"' $r.log 20 || fail "$r not ready"; done
  ctl=$(sed -n 's/.*"control": "\([0-9.]*:[0-9]*\)".*/\1/p' d0.log | head -n 1)
  # Outsiders come after the rooms: in CAF 0.17.6's OpenSSL module a failed
  # TLS handshake drops the node's other sessions too (docs/limits.md).
  for r in p0 d0; do wait_for batch_done $r.log 60 || fail "$r did not finish its rooms"; done
  timeout 8 "$K" serve "$SECRET" --role=decode --dp=4 --bootstrap-port="$p" --rooms=1 > plain.log 2>&1 && fail "a rank without TLS joined"
  timeout 20 "$K" serve "$SECRET" --tls-certificate=other.pem --tls-key=other.key --tls-cafile=rogue-ca.pem \
    --role=decode --dp=4 --bootstrap-port="$p" --rooms=1 > rogue.log 2>&1 && fail "a rank of another CA joined"
  if [ -n "$STRANGER" ]; then
    timeout 20 "$STRANGER" 10 "$ctl" > stranger.log 2>&1 && fail "a client without TLS reached a manager: $(cat stranger.log)"
  fi
  for r in p0 d0; do eval "wait_exit \$PID_$r 60" || fail "$r did not finish"; done
  for r in p0 d0; do
    [ "$(rooms $r.json success)" = 200 ] || fail "$r: $(rooms $r.json success) of 200 rooms succeeded"
  done
  grep -q data_error d0.json && fail "d0: data mismatch"
  echo "ok: control plane over mutual TLS (CAF 0.17.6's OpenSSL module): 200 rooms byte-exact; a rank without TLS, a rank of another CA and a client without TLS all kept out"
  ;;

idle_links)
  # Links close when idle and come back when a room needs them: a batch of
  # rooms, a pause past --idle-link-ms (both ranks back to "listed", the
  # control connection between them gone), a second batch byte-exact.
  p=$(port)
  start reg "$K" registry "$SECRET" --bootstrap-port="$p"
  wait_for '"ready"' reg.log 20 || fail "registry not ready"
  common=(--bootstrap-port="$p" --rooms=50 --then-rooms=50 --then-wait-file="$WORK/go" --idle-link-ms=400 --metrics-port=0)
  start p0 "$K" serve "$SECRET" --role=prefill --report=p0.json "${common[@]}"
  start d0 "$K" serve "$SECRET" --role=decode --report=d0.json "${common[@]}"
  for r in p0 d0; do wait_for batch_done $r.log 60 || fail "$r did not finish the first batch"; done
  dctl=$(sed -n 's/.*"control": "[0-9.]*:\([0-9]*\)".*/\1/p' d0.log | head -n 1)
  pm=$(sed -n 's/.*"metrics": "\([0-9.]*:[0-9]*\)".*/\1/p' p0.log | head -n 1)
  deadline=$(( $(date +%s) + 20 ))
  until curl -sf "http://$pm/metrics" | grep -q '^kvroom_peers{.*state="listed"} 1'; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "p0's link to d0 did not close when idle"
    sleep 0.1
  done
  if command -v ss >/dev/null; then
    sleep 0.3
    ss -tn | grep -q ":$dctl\b" && fail "a connection to d0's control port $dctl is still open: $(ss -tn | grep ":$dctl")"
  fi
  touch "$WORK/go"
  for r in p0 d0; do eval "wait_exit \$PID_$r 60" || fail "$r did not finish"; done
  check_ok 100 p0 d0
  grep -q "lost" p0.log d0.log && fail "a rank counted its idle peer lost"
  echo "ok: the idle link closed (no connection left between the ranks) and was made again for the second batch: 100 rooms byte-exact"
  ;;

etcd_*)
  # The directory on etcd: real etcd members on loopback (etcd_scenarios.sh).
  source "$HERE/etcd_scenarios.sh"
  ;;

*)
  echo "unknown scenario $SCENARIO"; exit 1 ;;
esac
exit 0
