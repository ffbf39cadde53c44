#!/usr/bin/env bash
# Broker benchmark: ../shared/bench/mqttbench against jetmq, mosquitto and amqtt, in ONE
# session with the same flags, so the ratios mean something on a shared 2-core machine.
#
#   scripts/bench_broker.sh                 # MQTT 5: all six scenarios, qos1 persistent, amqtt
#   REPEAT=1 BENCH_GROUPS="jetmq mosquitto" scripts/bench_broker.sh fanin qos1
#   scripts/bench_broker.sh idle            # 10,000 idle clients keeping alive (bench_idle.py)
#
# Groups: jetmq mosquitto persist amqtt (default: all), jetmq-pure / persist-pure (below), pyfloor (scripts/bench_pyfloor.py, a
# null broker in plain Python: the floor of Python per wake-up, for latency/qos1/fanin only:
#   BENCH_GROUPS="pyfloor mosquitto jetmq" scripts/bench_broker.sh latency
# ), jetmq-nobs / jetmq-obs (observability
# off / on, below), jetmq-quietlog (log.connections = false), and jetmq-old: the same scenarios
# against another checkout's jetmq (OLD=<checkout with its own .venv>, e.g. a worktree of the
# commit before a change): `OLD=/tmp/jetmq-old BENCH_GROUPS="jetmq-old jetmq"` A/Bs a change. Results: JSON per group in $OUT and a
# comparison table on stdout (mqttbench --compare), then each run's broker CPU with the CPU
# the hypervisor stole meanwhile (scripts/bench_host.py). Nothing generated here is committed.
# ROUNDS=N: the groups take turns N times (one run per scenario each) and the table is the
# per-round ratio of the last group to the first (scripts/bench_ab.py), e.g.
#   OLD=/tmp/jetmq-old ROUNDS=3 BENCH_GROUPS="jetmq-old jetmq" scripts/bench_broker.sh
#
# "persist" runs qos1 and latency (PERSIST_SCENARIOS) with a subscriber that holds a persistent
# session (MQTT 5 clean start 0 + Session Expiry 3600), so jetmq stores and fsyncs every
# message before its PUBACK (latency: the same at a paced 2,000 msg/s, with its CPU); mosquitto
# runs the same with its persistence-on config. The shared engine has no such option, so a
# temporary copy of it is patched at run time (subscriber CONNECTs only, behind an env var).
# Prerequisites: ./scripts/test or ./scripts/run once (.venv), `apt-get install mosquitto`.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=$(cd "$ROOT/../shared/bench/mqttbench" && pwd)
WORK=${WORK:-$(mktemp -d /tmp/jetmq-bench.XXXXXX)}
OUT=${OUT:-$WORK/results}
REPEAT=${REPEAT:-3}
PROTO=${PROTO:-5}
GATE=${GATE:---quiet-wait 240 --quiet-busy 40 --max-other 50 --max-retries 2}
BENCH_GROUPS=${BENCH_GROUPS:-jetmq mosquitto persist amqtt}
SCENARIOS=${*:-fanin fanout qos1 latency subs storm}
PERSIST_SCENARIOS=${PERSIST_SCENARIOS:-qos1 latency}
mkdir -p "$WORK" "$OUT"

# "idle" is not an mqttbench scenario: 10,000 connected clients that only keep alive (one
# PINGREQ each per keep alive), broker CPU of jetmq (log level warning) and mosquitto
# alternating, IDLE_ROUNDS rounds (default 3), by scripts/bench_idle.py (run it alone for
# its options: --clients, --keepalive, --window). It runs after the other scenarios:
#   scripts/bench_broker.sh latency idle
IDLE=0
rest=""
for s in $SCENARIOS; do
  if [ "$s" = idle ]; then IDLE=1; else rest="$rest $s"; fi
done
SCENARIOS=${rest# }
run_idle() {
  [ "$IDLE" = 1 ] || return 0
  echo
  python3 "$ROOT/scripts/bench_idle.py" --rounds "${IDLE_ROUNDS:-3}" --workdir "$WORK/idle" \
      --json "$OUT/idle.json"
}
if [ -z "$SCENARIOS" ]; then
  run_idle
  exit 0
fi

command -v mosquitto >/dev/null || { echo "bench_broker: mosquitto is not installed (apt-get install mosquitto)" >&2; exit 2; }
[ -x "$ROOT/.venv/bin/jetmq" ] || { echo "bench_broker: run ./scripts/test or ./scripts/run first" >&2; exit 2; }

# A private copy of the harness, with the persistent-subscriber patch.
rm -rf "$WORK/mqttbench"
cp -r "$SHARED" "$WORK/mqttbench"
rm -rf "$WORK/mqttbench/engine/build"
python3 - "$WORK/mqttbench/engine/mqttbench_engine.c" <<'PY'
import pathlib, sys
path = pathlib.Path(sys.argv[1])
src = path.read_text()
old = """    body[n++] = 0x02; /* clean session / clean start */
    n += put_u16(body + n, keepalive);
    if (g_proto == 5) body[n++] = 0; /* no properties: session expiry 0 */"""
new = """    int persist = getenv("MQB_PERSIST_SUBS") != NULL && strstr(client_id, "-s") != NULL;
    body[n++] = persist ? 0x00 : 0x02; /* clean session / clean start */
    n += put_u16(body + n, keepalive);
    if (g_proto == 5 && persist) { /* Session Expiry Interval 3600 */
        static const uint8_t props[] = {5, 0x11, 0x00, 0x00, 0x0e, 0x10};
        memcpy(body + n, props, sizeof props); n += sizeof props;
    } else if (g_proto == 5) body[n++] = 0; /* no properties: session expiry 0 */"""
if old not in src:
    sys.exit("bench_broker: the engine's CONNECT builder changed; update the patch")
path.write_text(src.replace(old, new))
PY

# Which hot path the jetmq groups run (hotpath/): compiled unless the build is
# missing or older than the sources (then scripts/build_native.py, or ./scripts/test).
echo "bench_broker: jetmq's hot path: $("$ROOT/.venv/bin/python" -c 'import hotpath as n; print(n.build_state())')"

MQB=$WORK/mqttbench/mqttbench.py
# MQB_OPTS: more mqttbench options for every group, e.g. one message in flight (the
# per-message cost without batching, back to back):
#   MQB_OPTS="-o qos1.window=1" BENCH_GROUPS="pyfloor mosquitto jetmq" scripts/bench_broker.sh qos1
run() { python3 "$MQB" --protocol "$PROTO" --repeat "$REPEAT" $GATE ${MQB_OPTS:-} "$@"; }

# jetmq logs what the mosquitto anchor logs (log_type error + warning): log.level "warning",
# so neither writes a line per connection (at "info", jetmq's default, a storm of connects
# runs at about half the rate: the jetmq-quietlog group below measures it).
printf '[log]\nlevel = "warning"\n' > "$WORK/bench.toml"
JETMQ="sh -c 'rm -rf $WORK/jetmq-data; exec $ROOT/.venv/bin/jetmq serve --config $WORK/bench.toml --listen 127.0.0.1:19840 --data-dir $WORK/jetmq-data'"
MOSQ="mosquitto -c $SHARED/anchors/mosquitto.conf"
MOSQP="sh -c 'rm -rf /tmp/mqttbench-mosq-persist; mkdir -p /tmp/mqttbench-mosq-persist; exec mosquitto -c $SHARED/anchors/mosquitto-persist.conf'"
AMQTT="$ROOT/.venv/bin/amqtt -c $SHARED/anchors/amqtt.yaml"
OLD=${OLD:-}
# Observability off vs on (issue 24), same code: "jetmq-nobs" runs with [sys] interval = 0
# and no HTTP; "jetmq-obs" publishes $SYS every second and serves /metrics, scraped every
# second for the whole run (the scraper ends with the broker). A/B them with
#   ROUNDS=3 BENCH_GROUPS="jetmq-nobs jetmq-obs" scripts/bench_broker.sh fanin qos1
printf '[sys]\ninterval = 0\n' > "$WORK/nobs.toml"
# "jetmq-quietlog": as jetmq-nobs (log.level "info") with log.connections = false:
#   ROUNDS=3 BENCH_GROUPS="jetmq-quietlog jetmq-nobs" scripts/bench_broker.sh storm
printf '[sys]\ninterval = 0\n[log]\nconnections = false\n' > "$WORK/quietlog.toml"
JETMQ_QUIETLOG="sh -c 'rm -rf $WORK/jetmq-data; exec $ROOT/.venv/bin/jetmq serve --config $WORK/quietlog.toml --listen 127.0.0.1:19844 --data-dir $WORK/jetmq-data'"
printf '[sys]\ninterval = 1\n[http]\nbind = "127.0.0.1:19850"\n' > "$WORK/obs.toml"
JETMQ_NOBS="sh -c 'rm -rf $WORK/jetmq-data; exec $ROOT/.venv/bin/jetmq serve --config $WORK/nobs.toml --listen 127.0.0.1:19842 --data-dir $WORK/jetmq-data'"
JETMQ_OBS="sh -c 'rm -rf $WORK/jetmq-data; (while sleep 1 && kill -0 \$\$ 2>/dev/null; do curl -s -o /dev/null http://127.0.0.1:19850/metrics; done) & exec $ROOT/.venv/bin/jetmq serve --config $WORK/obs.toml --listen 127.0.0.1:19843 --data-dir $WORK/jetmq-data'"
# "jetmq-pure" / "persist-pure": the same code interpreted (JETMQ_NATIVE=0: the hot path
# not compiled, hotpath/), to A/B the mypyc build in one run:
#   BENCH_GROUPS="jetmq-pure jetmq mosquitto persist-pure persist" scripts/bench_broker.sh
JETMQ_PURE="sh -c 'rm -rf $WORK/jetmq-pure-data; exec env JETMQ_NATIVE=0 $ROOT/.venv/bin/jetmq serve --config $WORK/bench.toml --listen 127.0.0.1:19845 --data-dir $WORK/jetmq-pure-data'"
JETMQ_OLD="sh -c 'rm -rf $WORK/jetmq-old-data; exec $OLD/.venv/bin/jetmq serve --config $WORK/bench.toml --listen 127.0.0.1:19841 --data-dir $WORK/jetmq-old-data'"

if [ -n "${ROUNDS:-}" ]; then
  # Alternating rounds for an A/B: every group once per round (one run per scenario), the
  # groups taking turns, then per-round ratios of the last group to the first (bench_ab.py).
  first=${BENCH_GROUPS%% *}; last=${BENCH_GROUPS##* }
  for i in $(seq 1 "$ROUNDS"); do
    for g in $BENCH_GROUPS; do
      OUT="$OUT" REPEAT=1 ROUNDS= BENCH_GROUPS="$g" WORK="$WORK" "$0" $SCENARIOS >/dev/null
      mv "$OUT/$g.json" "$OUT/$g-r$i.json"
    done
  done
  python3 "$ROOT/scripts/bench_ab.py" "$first" "$last" "$OUT"
  python3 "$ROOT/scripts/bench_host.py" "$OUT"
  run_idle
  echo "results in $OUT"
  exit 0
fi

jsons=()
for g in $BENCH_GROUPS; do
  case $g in
  jetmq)
    run --label jetmq --port 19840 --broker-cmd "$JETMQ" --broker-log "$WORK/jetmq.log" \
        --json "$OUT/jetmq.json" $SCENARIOS
    jsons+=("$OUT/jetmq.json") ;;
  jetmq-old)
    [ -x "$OLD/.venv/bin/jetmq" ] || { echo "bench_broker: OLD=<checkout with .venv> needed for jetmq-old" >&2; exit 2; }
    run --label jetmq-old --port 19841 --broker-cmd "$JETMQ_OLD" --broker-log "$WORK/jetmq-old.log" \
        --json "$OUT/jetmq-old.json" $SCENARIOS
    jsons+=("$OUT/jetmq-old.json") ;;
  jetmq-pure)
    run --label jetmq-pure --port 19845 --broker-cmd "$JETMQ_PURE" \
        --broker-log "$WORK/jetmq-pure.log" --json "$OUT/jetmq-pure.json" $SCENARIOS
    jsons+=("$OUT/jetmq-pure.json") ;;
  persist-pure)
    MQB_PERSIST_SUBS=1 run --label jetmq-pure-persist-session --port 19845 \
        --broker-cmd "$JETMQ_PURE" --broker-log "$WORK/jetmq-pure-persist.log" \
        --json "$OUT/jetmq-pure-persist.json" $PERSIST_SCENARIOS
    jsons+=("$OUT/jetmq-pure-persist.json") ;;
  jetmq-nobs)
    run --label jetmq-nobs --port 19842 --broker-cmd "$JETMQ_NOBS" --broker-log "$WORK/jetmq-nobs.log" \
        --json "$OUT/jetmq-nobs.json" $SCENARIOS
    jsons+=("$OUT/jetmq-nobs.json") ;;
  jetmq-quietlog)
    run --label jetmq-quietlog --port 19844 --broker-cmd "$JETMQ_QUIETLOG" \
        --broker-log "$WORK/jetmq-quietlog.log" --json "$OUT/jetmq-quietlog.json" $SCENARIOS
    jsons+=("$OUT/jetmq-quietlog.json") ;;
  jetmq-obs)
    command -v curl >/dev/null || { echo "bench_broker: jetmq-obs needs curl" >&2; exit 2; }
    run --label jetmq-obs --port 19843 --broker-cmd "$JETMQ_OBS" --broker-log "$WORK/jetmq-obs.log" \
        --json "$OUT/jetmq-obs.json" $SCENARIOS
    jsons+=("$OUT/jetmq-obs.json") ;;
  pyfloor)
    run --label pyfloor --port 19834 --broker-cmd "$ROOT/.venv/bin/python $ROOT/scripts/bench_pyfloor.py --port 19834" \
        --broker-log "$WORK/pyfloor.log" --json "$OUT/pyfloor.json" $SCENARIOS
    jsons+=("$OUT/pyfloor.json") ;;
  mosquitto)
    run --label mosquitto --port 19831 --broker-cmd "$MOSQ" --broker-log "$WORK/mosquitto.log" \
        --json "$OUT/mosquitto.json" $SCENARIOS
    jsons+=("$OUT/mosquitto.json") ;;
  persist)
    MQB_PERSIST_SUBS=1 run --label jetmq-persist-session --port 19840 --broker-cmd "$JETMQ" \
        --broker-log "$WORK/jetmq-persist.log" --json "$OUT/jetmq-persist.json" $PERSIST_SCENARIOS
    MQB_PERSIST_SUBS=1 run --label mosquitto-persist-session --port 19832 --broker-cmd "$MOSQP" \
        --broker-log "$WORK/mosquitto-persist.log" --json "$OUT/mosquitto-persist.json" \
        $PERSIST_SCENARIOS
    jsons+=("$OUT/jetmq-persist.json" "$OUT/mosquitto-persist.json") ;;
  amqtt)
    # As in the anchors: amqtt's subscribe cost is quadratic, so subs is scaled down and the
    # long scenarios use 25k messages (see ../shared/bench/ANCHORS.md).
    PROTO=3.1.1 run --label amqtt --port 19833 --broker-cmd "$AMQTT" --broker-log "$WORK/amqtt.log" \
        -o fanout.count=25000 -o qos1.count=25000 \
        -o subs.clients=100 -o subs.subs-total=5000 -o subs.count=1000 -o timeout=300 \
        --json "$OUT/amqtt.json" $SCENARIOS
    jsons+=("$OUT/amqtt.json") ;;
  *) echo "bench_broker: unknown group $g" >&2; exit 2 ;;
  esac
done
echo
python3 "$MQB" --compare "${jsons[@]}"
python3 "$ROOT/scripts/bench_host.py" "$OUT"
run_idle
echo "results in $OUT"
