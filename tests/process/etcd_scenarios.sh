# The directory on etcd, with real etcd members on loopback. Sourced by
# multiprocess_test.sh (its helpers, its cleanup of every process); skips
# (77, with the reason) where etcd is not installed.
command -v etcd >/dev/null && command -v etcdctl >/dev/null \
  || { echo "skipped: etcd is not installed (Debian: etcd-server, etcd-client)"; exit 77; }
export ETCDCTL_API=3

# etcd_members N: N members e0..e(N-1) on loopback, one cluster; sets
# ETCD_URL (for --directory) and ETCD_EPS (for etcdctl).
etcd_members() {
  local n=$1 base attempt
  # Ports are drawn at random: one another process holds makes its member
  # exit at once (and something else may answer there), so every member
  # must still run once the cluster is healthy, else new ports.
  for attempt in 1 2 3; do
    base=$(port)
    ETCD_CLUSTER="" ETCD_EPS=""
    for ((i = 0; i < n; ++i)); do
      ECP[$i]=$((base + 2 * i)); EPP[$i]=$((base + 2 * i + 1))
      ETCD_CLUSTER+="${ETCD_CLUSTER:+,}e$i=http://127.0.0.1:${EPP[$i]}"
      ETCD_EPS+="${ETCD_EPS:+,}127.0.0.1:${ECP[$i]}"
    done
    ETCD_URL="etcd://$ETCD_EPS"
    rm -rf "$WORK"/e*.data
    for ((i = 0; i < n; ++i)); do etcd_start $i new; done
    local up=1
    etcd_healthy "$ETCD_EPS" 30 || up=0
    for ((i = 0; i < n; ++i)); do eval "kill -0 \$PID_e$i" 2>/dev/null || up=0; done
    [ $up = 1 ] && return 0
    echo "etcd members on ports from $base did not all start (a port in use?); new ports"
    for ((i = 0; i < n; ++i)); do eval "kill -9 \$PID_e$i" 2>/dev/null; done
  done
  fail "etcd cluster not healthy"
}

# etcd_start I STATE: member eI (again, with its data, for STATE=existing).
etcd_start() {
  start e$1 etcd --name e$1 --data-dir "$WORK/e$1.data" \
    --listen-client-urls http://127.0.0.1:${ECP[$1]} --advertise-client-urls http://127.0.0.1:${ECP[$1]} \
    --listen-peer-urls http://127.0.0.1:${EPP[$1]} --initial-advertise-peer-urls http://127.0.0.1:${EPP[$1]} \
    --initial-cluster "$ETCD_CLUSTER" --initial-cluster-state "$2" --initial-cluster-token "kvroom-$$"
}

# etcd_healthy ENDPOINTS SECONDS
etcd_healthy() {
  local deadline=$(( $(date +%s) + $2 ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    etcdctl --endpoints="$1" --command-timeout=2s endpoint health >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  return 1
}

# etcd_leader: the index of the member that leads now.
etcd_leader() {
  etcdctl --endpoints="$ETCD_EPS" --command-timeout=2s endpoint status -w json 2>/dev/null | python3 -c '
import json, sys
for s in json.load(sys.stdin):
    if s["Status"]["header"]["member_id"] == s["Status"]["leader"]:
        print(s["Endpoint"])' | while read -r ep; do
    for i in "${!ECP[@]}"; do [ "$ep" = "127.0.0.1:${ECP[$i]}" ] && echo $i; done
  done
}

# lost_peers METRICS_ADDRESS: how many peers this rank counts as lost.
lost_peers() {
  curl -sf "http://$1/metrics" | sed -n 's/^kvroom_peers{.*state="lost"} \([0-9]*\).*/\1/p' | head -n 1
}

# wait_key listed|gone KEY SECONDS: until etcd lists KEY (or no longer
# does); 1 when the time is up.
wait_key() {
  local deadline=$(( $(date +%s) + $3 )) keys
  while [ "$(date +%s)" -lt "$deadline" ]; do
    keys=$(etcdctl --endpoints="$ETCD_EPS" get --prefix "$2" --keys-only)
    [ "$1" = listed ] && [ -n "$keys" ] && return 0
    [ "$1" = gone ] && [ -z "$keys" ] && return 0
    sleep 0.1
  done
  return 1
}

metrics_of() { sed -n 's/.*"metrics": "\([0-9.]*:[0-9]*\)".*/\1/p' "$1.log" | head -n 1; }
id_of() { sed -n 's/.*"rank_id": \([0-9]*\).*/\1/p' "$1.log" | head -n 1; }

case "$SCENARIO" in
etcd_cluster)
  # 2P x 2D (TP 2) on a 3-member cluster, lease TTL 3 s, rooms moving. A
  # follower is killed and comes back; then three times in a row the member
  # leading at that moment is killed (the first leader, then the one
  # elected after it, ...), and a rogue with decode tp0's id and place
  # tries to register while the election runs. After each: the rogue was
  # refused, every entry is listed with the lease and revision it had (no
  # entry lost, no rank registered again), and the member comes back. The
  # ranks stay up until the end (a second batch waits for a file), so what
  # is listed never depends on how fast the rooms ran.
  etcd_members 3
  P=/kvroom/t$$
  D=(--directory="$ETCD_URL" --directory-prefix=$P --lease-ttl-ms=3000)
  run=(--rooms=2000 --pace-us=4000 --then-rooms=100 --then-wait-file="$WORK/go")
  start p0 "$K" serve "$SECRET" "${D[@]}" --role=prefill --tp=0 --tp-size=2 "${run[@]}" --report=p0.json
  start p1 "$K" serve "$SECRET" "${D[@]}" --role=prefill --tp=1 --tp-size=2 "${run[@]}" --report=p1.json
  start d0 "$K" serve "$SECRET" "${D[@]}" --role=decode --tp=0 --tp-size=2 "${run[@]}" --report=d0.json
  start d1 "$K" serve "$SECRET" "${D[@]}" --role=decode --tp=1 --tp-size=2 "${run[@]}" --report=d1.json
  for r in p0 p1 d0 d1; do wait_for '"ready"' $r.log 30 || fail "$r not ready"; done
  # listing ENDPOINTS: each entry's key, lease and last revision, one a
  # line; a read that fails fails the test (it is never "no entries").
  listing() {
    etcdctl --endpoints="$1" --command-timeout=5s get --prefix $P/ranks/ -w json > listing.json \
      || fail "etcdctl could not read the prefix from $1"
    python3 -c '
import base64, json, sys
kvs = json.load(open("listing.json")).get("kvs", [])
for kv in sorted(kvs, key=lambda kv: kv["key"]):
    print(base64.b64decode(kv["key"]).decode(), kv.get("lease", 0), kv["mod_revision"])'
  }
  listing "$ETCD_EPS" > before.txt
  [ "$(wc -l < before.txt)" = 4 ] || fail "not 4 entries in etcd: $(cat before.txt)"
  leader=$(etcd_leader); [ -n "$leader" ] || fail "no etcd leader found"
  follower=$(( (leader + 1) % 3 ))
  eval "kill -9 \$PID_e$follower"
  echo "killed etcd follower e$follower"
  sleep 2
  etcd_start $follower existing
  etcd_healthy "127.0.0.1:${ECP[$follower]}" 30 || fail "e$follower did not come back"
  for round in 1 2 3; do
    leader=$(etcd_leader); [ -n "$leader" ] || fail "round $round: no etcd leader found"
    eval "kill -9 \$PID_e$leader"
    killed_at=$(now_ms)
    # The rogue starts at a different moment of the election each round.
    sleep "$(echo "0 0.3 0.8" | cut -d' ' -f$round)"
    timeout 40 "$K" serve "$SECRET" "${D[@]}" --role=decode --tp=0 --tp-size=2 --rooms=1 \
      > rogue$round.log 2>&1 &
    rogue=$!
    PIDS+=($rogue)
    rest=""; for ((i = 0; i < 3; ++i)); do [ $i = "$leader" ] || rest+="${rest:+,}127.0.0.1:${ECP[$i]}"; done
    etcd_healthy "$rest" 30 || fail "round $round: no quorum after the leader's loss"
    elected=$(( $(now_ms) - killed_at ))
    wait "$rogue" && fail "round $round: a rogue with a live rank's id registered during the election"
    grep -q '"ready"' rogue$round.log && fail "round $round: the rogue said ready"
    grep -q "is held by the live\|takes the place of the live" rogue$round.log \
      || fail "round $round: the rogue was not refused for the live id: $(tail -n 2 rogue$round.log)"
    sleep 4  # more than the lease TTL: every lease was renewed through it
    listing "$rest" > after.txt
    diff before.txt after.txt > /dev/null \
      || fail "round $round (leader e$leader killed): the entries changed: before $(cat before.txt | tr '\n' ';') after $(cat after.txt | tr '\n' ';')"
    echo "round $round: leader e$leader killed, a new one after $elected ms; the rogue refused ($(grep -o 'is held by the live[^(]*' rogue$round.log | head -n 1)); 4 entries kept, none registered again"
    etcd_start $leader existing
    etcd_healthy "127.0.0.1:${ECP[$leader]}" 30 || fail "round $round: e$leader did not come back"
  done
  for r in p0 p1 d0 d1; do wait_for batch_done $r.log 120 || fail "$r did not finish its rooms"; done
  touch "$WORK/go"
  for r in p0 p1 d0 d1; do eval "wait_exit \$PID_$r 90" || fail "$r did not finish"; done
  check_all_ok 2100
  for r in p0 p1 d0 d1; do
    # A renewal round may fail while no member has a leader (logged); the
    # lease itself must never be lost.
    grep -q "registering them again\|vanished" $r.log \
      && fail "$r: its lease or entry was lost: $(grep -m1 'registering them again\|vanished' $r.log)"
  done
  echo "ok: 2100 rooms byte-exact on 2P x 2D over a 3-member etcd directory (TTL 3 s); a follower killed and back, then the leader killed three times in a row: no room failed, every entry kept on its lease, a rogue with a live id refused during each election"
  ;;

etcd_sigkill)
  # Two DP groups (a: prefill, b: decode). a1 is SIGKILLed: b1, linked to
  # it, fails the rooms it was in with a1 as origin; a0 and b0 never linked
  # to it and learn it from etcd within the lease TTL. A replacement with
  # a1's id registers once the lease is gone and serves new rooms.
  etcd_members 1
  TTL=2000
  D=(--directory="$ETCD_URL" --directory-prefix=/kvroom/t$$ --lease-ttl-ms=$TTL --metrics-port=0)
  common=(--tp-size=1 --rooms=400 --pace-us=5000 --timeout-ms=1500 --then-rooms=40 --then-wait-file="$WORK/go")
  start a0 "$K" serve "$SECRET" "${D[@]}" --role=prefill --dp=0 --report=a0.json "${common[@]}"
  start b0 "$K" serve "$SECRET" "${D[@]}" --role=decode --dp=0 --report=b0.json "${common[@]}"
  start a1 "$K" serve "$SECRET" "${D[@]}" --role=prefill --dp=1 --first-room=100001 --report=a1.json "${common[@]}"
  start b1 "$K" serve "$SECRET" "${D[@]}" --role=decode --dp=1 --first-room=100001 --report=b1.json "${common[@]}"
  for r in a0 b0 a1 b1; do wait_for '"ready"' $r.log 30 || fail "$r not ready"; done
  sleep 0.8
  for r in a0 b0; do
    [ "$(lost_peers "$(metrics_of $r)")" = 0 ] || fail "$r counts a peer lost before the kill"
  done
  a1_id=$(id_of a1)
  kill -9 "$PID_a1"
  killed=$(now_ms)
  # Learned without a link: a0 and b0 count a1 lost (scraped).
  for r in a0 b0; do
    m=$(metrics_of $r)
    until [ "$(lost_peers "$m")" = 1 ]; do
      [ $(( $(now_ms) - killed )) -lt $(( 3 * TTL )) ] || fail "$r did not learn of a1's loss within $(( 3 * TTL )) ms"
      sleep 0.05
    done
    echo "$r (no link to a1) learned of its loss after $(( $(now_ms) - killed )) ms (lease TTL $TTL ms)"
  done
  # The replacement: a1's id, registering as soon as etcd frees it.
  start a1 "$K" serve "$SECRET" "${D[@]}" --role=prefill --dp=1 --rank-id="$a1_id" --tp-size=1 \
    --first-room=100401 --rooms=40 --timeout-ms=1500 --wait-file="$WORK/go" --report=a1r.json
  wait_for '"ready"' a1.log 20 || fail "replacement a1 not ready"
  for r in a0 b0 b1; do wait_for batch_done $r.log 60 || fail "$r did not finish phase 1"; done
  touch "$WORK/go"
  for r in a0 b0 a1 b1; do eval "wait_exit \$PID_$r 60" || fail "$r did not finish phase 2"; done
  for r in a0 b0; do
    [ "$(rooms $r.json success)" = 440 ] || fail "$r (dp0): $(rooms $r.json success) of 440 rooms succeeded"
    grep -q data_error $r.json && fail "$r: data mismatch"
  done
  failed=$(rooms b1.json failed)
  [ "$failed" -gt 0 ] || fail "b1: no room failed with a1's loss"
  python3 - "$a1_id" <<'PY' || fail "b1: a failed room without a1 as its origin"
import json, sys
origin = int(sys.argv[1])
rooms = json.load(open("b1.json"))["rooms"]
bad = [r for r in rooms if r["state"] == "failed" and r.get("origin_rank") != origin]
sys.exit(1 if bad else 0)
PY
  [ "$(rooms a1r.json success)" = 40 ] || fail "replacement a1: $(rooms a1r.json success) of 40 rooms succeeded"
  tail=$(python3 -c 'import json; r=json.load(open("b1.json"))["rooms"]; print(sum(1 for x in r if x["room"] >= 100401 and x["state"] == "success"))')
  [ "$tail" = 40 ] || fail "b1: $tail of the 40 rooms with the replacement succeeded"
  echo "ok: a1 SIGKILLed: b1 failed $failed rooms, each with a1 (#$a1_id) as origin; a0 and b0 learned it from etcd without a link; the replacement with a1's id served 40 new rooms byte-exact"
  ;;

etcd_refusals)
  # Registration refused for a live id, a live place, a misfit layout; an
  # entry written straight into etcd without the secret's proof is ignored
  # by every reader (and its key is free for the rank it names).
  etcd_members 1
  P=/kvroom/t$$
  D=(--directory="$ETCD_URL" --directory-prefix=$P --lease-ttl-ms=2000)
  start p0 "$K" serve "$SECRET" "${D[@]}" --role=prefill --rooms=50 --wait-file="$WORK/go" \
    --hold-ms=15000 --metrics-port=0 --report=p0.json
  wait_for '"ready"' p0.log 30 || fail "p0 not ready"
  id=$(id_of p0)
  timeout 20 "$K" serve "$SECRET" "${D[@]}" --role=prefill --dp=3 --rank-id="$id" --rooms=1 > same_id.log 2>&1 \
    && fail "a second rank with a live id registered"
  grep -q "is held by the live" same_id.log || fail "no reason for the id refusal: $(tail -n 2 same_id.log)"
  timeout 20 "$K" serve "$SECRET" "${D[@]}" --role=prefill --rank-id=4242 --rooms=1 > same_place.log 2>&1 \
    && fail "a second rank in a live place registered"
  grep -q "takes the place of the live" same_place.log || fail "no reason for the place refusal: $(tail -n 2 same_place.log)"
  timeout 20 "$K" serve "$SECRET" "${D[@]}" --role=decode --page-bytes=8192 --rooms=1 > misfit.log 2>&1 \
    && fail "a misfit layout registered"
  grep -q "8192 B pages" misfit.log || fail "no reason for the layout refusal: $(tail -n 2 misfit.log)"
  # A forgery: p0's own entry, its control endpoint moved, under the id the
  # decode rank will take, and a well-formed entry with a made-up proof.
  did=65536
  etcdctl --endpoints="$ETCD_EPS" get --print-value-only "$P/ranks/$id" > real.json
  python3 - real.json forged.json <<'PY'
import base64, json, sys
doc = json.load(open(sys.argv[1]))
doc["control"] = "127.0.0.1:1"
doc["mac"] = base64.b64encode(b"\x00" * 32).decode()
json.dump(doc, open(sys.argv[2], "w"))
PY
  etcdctl --endpoints="$ETCD_EPS" put "$P/ranks/$did" "$(cat forged.json)" >/dev/null || fail "cannot write the forgery"
  etcdctl --endpoints="$ETCD_EPS" put "$P/ranks/777" '{"kvroom":1,"entry":"AAAA","mac":"AAAA","lease":"1"}' >/dev/null
  start d0 "$K" serve "$SECRET" "${D[@]}" --role=decode --rooms=50 --wait-file="$WORK/go" --report=d0.json
  wait_for '"ready"' d0.log 30 || fail "d0 not ready over a forged entry under its id"
  touch "$WORK/go"
  wait_exit "$PID_d0" 60 || fail "d0 did not finish"
  [ "$(rooms d0.json success)" = 50 ] || fail "d0: $(rooms d0.json success) of 50 rooms succeeded"
  grep -q "its proof fails\|signed for lease" d0.log || fail "d0 did not report the forged entry"
  listed=$(curl -sf "http://$(metrics_of p0)/metrics" | sed -n 's/^kvroom_peers{.*state="listed"} \([0-9]*\).*/\1/p')
  usable=$(curl -sf "http://$(metrics_of p0)/metrics" | sed -n 's/^kvroom_peers{.*state="usable"} \([0-9]*\).*/\1/p')
  [ $(( listed + usable )) -le 1 ] || fail "p0 lists $listed + $usable peers: a forged entry counted"
  echo "ok: refused a live id, a live place and a misfit layout with the reason; forged entries ignored by every reader, the forged key taken by its rightful rank, 50 rooms byte-exact"
  ;;

etcd_scale)
  # 32 rank processes started at once (8 DP groups of 2 prefill + 2 decode,
  # TP 2, tiny memory each) on one etcd member: bounded time to ready.
  etcd_members 1
  D=(--directory="$ETCD_URL" --directory-prefix=/kvroom/t$$ --lease-ttl-ms=3000)
  t0=$(now_ms)
  names=()
  for dp in 0 1 2 3 4 5 6 7; do
    for side in prefill decode; do
      for tp in 0 1; do
        n=${side:0:1}${dp}_$tp
        start $n "$K" serve "$SECRET" "${D[@]}" --role=$side --dp=$dp --tp=$tp --tp-size=2 \
          --threads=1 --layers=1 --pages-per-room=2 --concurrency=4 --rooms=20 --first-room=$((dp * 1000 + 1)) \
          --wait-file="$WORK/go" --report=$n.json
        names+=($n)
      done
    done
  done
  for n in "${names[@]}"; do wait_for '"ready"' $n.log 120 || fail "$n not ready"; done
  echo "32 rank processes ready $(( $(now_ms) - t0 )) ms after they started"
  touch "$WORK/go"
  for n in "${names[@]}"; do eval "wait_exit \$PID_$n 120" || fail "$n did not finish"; done
  for n in "${names[@]}"; do
    [ "$(rooms $n.json success)" = 20 ] || fail "$n: $(rooms $n.json success) of 20 rooms succeeded"
  done
  echo "ok: 32 rank processes on an etcd directory, all ready, 20 rooms byte-exact per rank"
  ;;
etcd_secured)
  # etcd's own TLS and auth pass through: a member serving https only with
  # a certificate of a test CA, auth on with a root user. Ranks with the CA
  # and the user's password work; without the password, over plain http, or
  # trusting another CA they are refused with etcd's reason.
  command -v openssl >/dev/null || { echo "skipped: the openssl tool is not installed"; exit 77; }
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj "/CN=kvroom-test-ca" 2>/dev/null || fail "making a CA"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout rogue.key -out rogue.pem -days 2 -subj "/CN=rogue" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout etcd.key -out etcd.csr -subj "/CN=127.0.0.1" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\n' > san.ext
  openssl x509 -req -in etcd.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out etcd.pem -days 2 -extfile san.ext 2>/dev/null || fail "signing etcd's certificate"
  base=$(port); c=$base; pp=$((base + 1))
  start e0 etcd --name e0 --data-dir "$WORK/e0.data" \
    --listen-client-urls https://127.0.0.1:$c --advertise-client-urls https://127.0.0.1:$c \
    --cert-file=etcd.pem --key-file=etcd.key \
    --listen-peer-urls http://127.0.0.1:$pp --initial-advertise-peer-urls http://127.0.0.1:$pp \
    --initial-cluster e0=http://127.0.0.1:$pp
  CTL=(etcdctl --endpoints=127.0.0.1:$c --cacert=ca.pem --command-timeout=3s)
  deadline=$(( $(date +%s) + 30 ))
  until "${CTL[@]}" endpoint health >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "etcd over TLS not healthy"
    sleep 0.2
  done
  "${CTL[@]}" user add root --new-user-password=kvroom-pw >/dev/null || fail "adding etcd's root user"
  "${CTL[@]}" auth enable >/dev/null || fail "enabling etcd's auth"
  printf 'kvroom-pw\n' > pw && chmod 600 pw
  D=(--directory=etcds://127.0.0.1:$c --directory-prefix=/kvroom/t$$ --etcd-cacert=ca.pem)
  AUTH=(--etcd-user=root --etcd-password-file=pw)
  timeout 20 "$K" serve "$SECRET" "${D[@]}" --role=prefill --rooms=1 > nouser.log 2>&1 && fail "a rank without etcd credentials registered"
  grep -qi "user name is empty\|permission denied\|authenticat" nouser.log || fail "no reason without credentials: $(tail -n 1 nouser.log)"
  # Plain http to an https member reads as an unreachable member (retried
  # until the directory's connect timeout): it never registers.
  timeout 6 "$K" serve "$SECRET" --directory=etcd://127.0.0.1:$c --directory-prefix=/kvroom/t$$ "${AUTH[@]}" --role=prefill --rooms=1 > plain.log 2>&1 && fail "a rank over plain http registered"
  timeout 20 "$K" serve "$SECRET" --directory=etcds://127.0.0.1:$c --directory-prefix=/kvroom/t$$ --etcd-cacert=rogue.pem "${AUTH[@]}" --role=prefill --rooms=1 > rogue.log 2>&1 && fail "a rank trusting another CA registered"
  grep -q "SSLServerVerification\|SSLConnection" rogue.log || fail "no reason for the CA refusal: $(tail -n 1 rogue.log)"
  start p0 "$K" serve "$SECRET" "${D[@]}" "${AUTH[@]}" --role=prefill --rooms=100 --report=p0.json
  start d0 "$K" serve "$SECRET" "${D[@]}" "${AUTH[@]}" --role=decode --rooms=100 --report=d0.json
  for r in p0 d0; do eval "wait_exit \$PID_$r 60" || fail "$r did not finish"; done
  check_ok 100 p0 d0
  echo "ok: etcd over TLS with auth: 100 rooms byte-exact; without credentials ($(tail -n 1 nouser.log | cut -c1-120)...), over plain http and trusting another CA: refused"
  ;;
etcd_lease)
  # A rank frozen longer than its lease (SIGSTOP): etcd drops its entry and
  # its peer counts it gone; thawed, it finds its lease expired, takes a new
  # one and registers again, and the next rooms succeed on both sides.
  etcd_members 1
  D=(--directory="$ETCD_URL" --directory-prefix=/kvroom/t$$ --lease-ttl-ms=2000 --timeout-ms=1500)
  start p0 "$K" serve "$SECRET" "${D[@]}" --role=prefill --rooms=100 --pace-us=10000 --then-rooms=40 --then-wait-file="$WORK/go" --report=p0.json
  start d0 "$K" serve "$SECRET" "${D[@]}" --role=decode --rooms=100 --pace-us=10000 --then-rooms=40 --then-wait-file="$WORK/go" --report=d0.json
  for r in p0 d0; do wait_for '"ready"' $r.log 30 || fail "$r not ready"; done
  # An entry deleted by hand while its rank lives (an operator's etcdctl
  # del): the rank registers again at once, on its live lease, and says so
  # once.
  etcdctl --endpoints="$ETCD_EPS" del /kvroom/t$$/ranks/0 > /dev/null || fail "cannot delete p0's entry"
  wait_for "vanished from the store while it lives" p0.log 10 || fail "p0 did not notice its entry vanish"
  wait_key listed /kvroom/t$$/ranks/0 10 || fail "p0's entry did not come back"
  [ "$(grep -c 'vanished from the store' p0.log)" = 1 ] || fail "p0 logged its entry's loss more than once"
  echo "p0's entry deleted by hand: registered again at once ($(grep -o 'lease [0-9a-f]* alive[^)]*' p0.log | head -n 1))"
  sleep 0.3
  kill -STOP "$PID_d0"
  stopped=$(now_ms)
  wait_key gone /kvroom/t$$/ranks/65536 10 || { kill -CONT "$PID_d0"; fail "d0's entry outlived its lease"; }
  echo "d0's entry gone from etcd $(( $(now_ms) - stopped )) ms after it froze"
  sleep 0.5
  kill -CONT "$PID_d0"
  wait_for "registering them again" d0.log 10 || fail "d0 did not register again after its lease expired"
  wait_key listed /kvroom/t$$/ranks/65536 10 || fail "d0's entry did not come back"
  for r in p0 d0; do wait_for batch_done $r.log 60 || fail "$r did not finish phase 1"; done
  touch "$WORK/go"
  for r in p0 d0; do eval "wait_exit \$PID_$r 60" || fail "$r did not finish phase 2"; done
  tail=$(python3 -c 'import json; r=json.load(open("d0.json"))["rooms"]; print(sum(1 for x in r if x["room"] > 100 and x["state"] == "success"))')
  [ "$tail" = 40 ] || fail "d0: $tail of the 40 rooms after its return succeeded"
  grep -q data_error d0.json && fail "d0: data mismatch"
  echo "ok: d0 frozen past its lease: its entry went, it took a new lease and registered again, and 40 new rooms succeeded ($(rooms d0.json failed) rooms failed around the freeze)"
  ;;
esac
