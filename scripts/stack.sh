# Shell helpers that run the whole engine on this machine for the smoke,
# chaos and benchmark scripts: a private cluster (scripts/pg.sh), fresh
# databases, provider-sim and `payrail serve` processes on loopback ports.
# Every process started here is stopped on exit, before the cluster is.
# Needs PAYRAIL_BIN (the payrail binary) set by the caller.

source "$(dirname "${BASH_SOURCE[0]}")/pg.sh"

STACK_PIDS=()

stack_cleanup() {
    local pid
    for pid in "${STACK_PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    for pid in "${STACK_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    pg_private_cluster_cleanup
}

# stack_cluster PARENT_DIR [fsync-off|durable]: the cluster, with cleanup of
# everything on exit.
stack_cluster() {
    pg_private_cluster "$@"
    trap stack_cleanup EXIT
    STACK_ADMIN_URL="postgres://postgres@127.0.0.1:${PG_PORT}/postgres"
}

# stack_installed COMMAND [PACKAGE]: installs the Debian package (by
# default named as the command) when the command is missing: haproxy and
# etcd for the cluster scripts, wrk, the benchmark's lean HTTP client.
stack_installed() {
    if ! command -v "$1" >/dev/null; then
        echo "installing ${2:-$1}"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${2:-$1}" >/dev/null
    fi
}

# stack_fields TAG FILE: the line "TAG key=number ..." that a lean client
# (wrk's create.lua, payrail-pace) printed into FILE becomes the shell
# variables TAG_KEY (upper case). Without such a line it prints FILE and
# fails.
stack_fields() {
    local line
    line=$(grep "^$1 " "$2") || { cat "$2" >&2; return 1; }
    eval "$(echo "$line" | sed -E "s/^$1 //; s/([a-z0-9_]+)=/$1_\U\1=/g")"
}

# Webhook flags of the scripts whose sink fails 10 % of deliveries on
# purpose (smoke, chaos, cluster): loopback receivers allowed, due
# deliveries polled every 200 ms, and the retry schedule scaled so that all
# seven delays together take about 10 s (12 s with jitter). The load
# generator waits 60 s after the drain for every webhook; at 0.001 the
# delays added up to 63 s, so an event the sink refused six times in a row
# (one run in about a hundred) arrived after that wait.
STACK_WEBHOOK_TEST_FLAGS=(--webhook-allow-private --webhook-retry-scale 0.0001 --webhook-poll 200ms)

# stack_port: sets PORT to a free port that no earlier stack_port call of
# this script handed out (pg_free_port may hand out the same one twice
# before anything listens on it). Call it as a command, not in $(...), so
# that STACK_USED_PORTS keeps growing.
STACK_USED_PORTS=" "
stack_port() {
    while :; do
        PORT=$(pg_free_port)
        [[ $STACK_USED_PORTS == *" $PORT "* ]] || { STACK_USED_PORTS+="$PORT "; return; }
    done
}

# stack_fresh_db NAME: creates database NAME, applies the migrations and
# prints its URL.
stack_fresh_db() {
    "$PG_BIN/psql" -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -c "CREATE DATABASE $1" >/dev/null
    local url="postgres://postgres@127.0.0.1:${PG_PORT}/$1"
    "$PAYRAIL_BIN" migrate --database-url "$url" >/dev/null
    echo "$url"
}

# stack_wait_http URL [SECONDS]: waits until URL answers 2xx.
stack_wait_http() {
    local deadline=$((SECONDS + ${2:-30}))
    until curl -fsS -o /dev/null "$1" 2>/dev/null; do
        if [ "$SECONDS" -ge "$deadline" ]; then echo "$1 did not come up" >&2; return 1; fi
        sleep 0.1
    done
}

# stack_sim PORT [FLAGS...]: starts provider-sim; sets SIM_PID and SIM_URL.
stack_sim() {
    local port=$1; shift
    "$PAYRAIL_BIN" provider-sim --listen "127.0.0.1:$port" "$@" >"$STACK_LOGS/sim-$port.log" 2>&1 &
    SIM_PID=$!
    STACK_PIDS+=("$SIM_PID")
    SIM_URL="http://127.0.0.1:$port"
    stack_wait_http "$SIM_URL/stats"
}

# stack_serve PORT DATABASE_URL [FLAGS...]: starts `payrail serve` and waits
# until it is ready; sets SERVE_PID and SERVE_URL.
stack_serve() {
    local port=$1 db=$2; shift 2
    RUST_LOG=${PAYRAIL_SERVE_LOG:-warn} "$PAYRAIL_BIN" serve --listen "127.0.0.1:$port" --database-url "$db" "$@" \
        >>"$STACK_LOGS/serve-$port.log" 2>&1 &
    SERVE_PID=$!
    STACK_PIDS+=("$SERVE_PID")
    SERVE_URL="http://127.0.0.1:$port"
    stack_wait_http "$SERVE_URL/readyz" 60
}

# stack_client DATABASE_URL NAME: creates a client and prints its API key.
stack_client() {
    "$PAYRAIL_BIN" client create --name "$2" --database-url "$1" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["api_key"])'
}

# stack_webhook_sink SERVE_URL API_KEY PORT [FLAGS...]: registers the
# client's webhook endpoint at a sink on PORT, then starts `payrail
# webhook-sink` there with the endpoint's secret (by environment, not on a
# command line `ps` shows); sets SINK_PID and SINK_URL. serve needs
# --webhook-allow-private, since the sink is on loopback.
stack_webhook_sink() {
    local serve=$1 key=$2 port=$3 secret; shift 3
    SINK_URL="http://127.0.0.1:$port"
    secret=$(curl -fsS "$serve/webhook_endpoints" -H "Authorization: Bearer $key" \
        -H 'Content-Type: application/json' -d "{\"url\": \"$SINK_URL/hooks\"}" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["secret"])')
    PAYRAIL_SINK_SECRET=$secret "$PAYRAIL_BIN" webhook-sink --listen "127.0.0.1:$port" "$@" \
        >"$STACK_LOGS/sink-$port.log" 2>&1 &
    SINK_PID=$!
    STACK_PIDS+=("$SINK_PID")
    stack_wait_http "$SINK_URL/stats"
}
