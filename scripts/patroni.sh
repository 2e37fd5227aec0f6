# Shell helpers that run Postgres under Patroni over etcd on this machine,
# with HAProxy's Postgres front, from the files in deploy/ (sourced by
# scripts/cluster and scripts/scaling-bench after scripts/stack.sh). They
# install what is missing: etcd-server, etcd-client and haproxy from
# Debian, Patroni from PyPI (pinned in deploy/patroni-requirements.txt)
# into a virtual environment at /opt/payrail-patroni.
#
# Needs ROOT (a directory of the run, world-readable), STACK_LOGS and
# PG_BIN set by the caller. Nodes are node1, node2 (indexes 0, 1); their
# Postgres processes run as postgres when the caller is root. Nothing here
# promotes, demotes or edits replication settings: Patroni does.
# patroni_cleanup kills everything it started.

PATRONI_VENV=${PAYRAIL_PATRONI_VENV:-/opt/payrail-patroni}
PATRONI=$PATRONI_VENV/bin/patroni
PATRONICTL=$PATRONI_VENV/bin/patronictl
NODE_NAME=(node1 node2)
PATRONI_PGID=() ETCD_PID=() ETCD_CLIENT=() ETCD_PEER=() PG_PORT_OF=() API_PORT=()

# patroni_installed: etcd, HAProxy and Patroni, installed when missing.
# Patroni is reinstalled when the pinned list changes (its copy in the venv
# differs).
patroni_installed() {
    stack_installed haproxy
    stack_installed etcd etcd-server
    stack_installed etcdctl etcd-client
    if ! cmp -s deploy/patroni-requirements.txt "$PATRONI_VENV/payrail-requirements.txt"; then
        echo "installing Patroni into $PATRONI_VENV"
        # The system's Python: the venv must be usable by the postgres user.
        rm -rf "$PATRONI_VENV"
        /usr/bin/python3 -m venv "$PATRONI_VENV" 2>/dev/null || {
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
            /usr/bin/python3 -m venv "$PATRONI_VENV"
        }
        "$PATRONI_VENV/bin/pip" install -q --disable-pip-version-check -r deploy/patroni-requirements.txt
        cp deploy/patroni-requirements.txt "$PATRONI_VENV/payrail-requirements.txt"
    fi
}

# patroni_cleanup: kills every process started here (Patroni, all of each
# node's Postgres processes, even stopped ones, and etcd).
patroni_cleanup() {
    local n pm pid
    for n in 0 1; do
        [ -n "${PATRONI_PGID[n]:-}" ] && kill -KILL -- "-${PATRONI_PGID[n]}" 2>/dev/null || true
        pm=$(pg_group "$n")
        if [ -n "$pm" ]; then kill -CONT -- "-$pm" 2>/dev/null || true; kill -KILL -- "-$pm" 2>/dev/null || true; fi
    done
    for pid in "${ETCD_PID[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    for pid in "${ETCD_PID[@]}"; do wait "$pid" 2>/dev/null || true; done
}

# pg_group N: the process group of node N's Postgres (every Postgres
# process of the node), or nothing. Patroni starts the postmaster from a
# helper that made itself a new session, so the group is the helper's id,
# not the postmaster's.
pg_group() {
    local pm
    pm=$(head -n 1 "$ROOT/pg/${NODE_NAME[$1]}/postmaster.pid" 2>/dev/null) || return 0
    ps -o pgid= -p "$pm" 2>/dev/null | tr -d ' ' || true
}

# etcd_up: three members on loopback (deploy/etcd.env); waits until healthy.
# Sets ETCD_HOSTS.
etcd_up() {
    local e initial="" deadline=$((SECONDS + 60))
    for e in 0 1 2; do stack_port; ETCD_CLIENT[e]=$PORT; stack_port; ETCD_PEER[e]=$PORT; done
    for e in 0 1 2; do initial+="${initial:+,}e$((e + 1))=http://127.0.0.1:${ETCD_PEER[e]}"; done
    ETCD_INITIAL=$initial
    ETCD_HOSTS="127.0.0.1:${ETCD_CLIENT[0]},127.0.0.1:${ETCD_CLIENT[1]},127.0.0.1:${ETCD_CLIENT[2]}"
    for e in 0 1 2; do etcd_start "$e"; done
    until ETCDCTL_API=3 etcdctl --endpoints "$ETCD_HOSTS" endpoint health >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || { echo "etcd did not come up" >&2; return 1; }
        sleep 0.2
    done
    # patronictl needs only the scope and where etcd is.
    printf 'scope: payrail\nnamespace: /payrail/\netcd3:\n  hosts: %s\n' "$ETCD_HOSTS" >"$ROOT/patronictl.yml"
}

# etcd_start E: member E, with its data directory (created on the first
# start; a restart rejoins with what it stored).
etcd_start() {
    local e=$1
    (
        set -a
        # shellcheck source=../deploy/etcd.env
        . deploy/etcd.env
        ETCD_NAME=e$((e + 1))
        ETCD_DATA_DIR=$ROOT/etcd$((e + 1))
        ETCD_LISTEN_CLIENT_URLS=http://127.0.0.1:${ETCD_CLIENT[e]}
        ETCD_ADVERTISE_CLIENT_URLS=$ETCD_LISTEN_CLIENT_URLS
        ETCD_LISTEN_PEER_URLS=http://127.0.0.1:${ETCD_PEER[e]}
        ETCD_INITIAL_ADVERTISE_PEER_URLS=$ETCD_LISTEN_PEER_URLS
        ETCD_INITIAL_CLUSTER=$ETCD_INITIAL
        set +a
        exec etcd
    ) >>"$STACK_LOGS/etcd$((e + 1)).log" 2>&1 &
    ETCD_PID[e]=$!
}

# etcd_healthy E: until member E answers (60 s at most).
etcd_healthy() {
    local deadline=$((SECONDS + 60))
    until ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:${ETCD_CLIENT[$1]}" endpoint health >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || { echo "etcd member e$(($1 + 1)) did not come back" >&2; return 1; }
        sleep 0.2
    done
}

patronictl() { "$PATRONICTL" -c "$ROOT/patronictl.yml" "$@"; }

# patroni_pair_up: node1 bootstraps the cluster, node2 clones it and
# becomes its synchronous standby; returns once it streams as such.
patroni_pair_up() {
    local n deadline=$((SECONDS + 90))
    for n in 0 1; do stack_port; PG_PORT_OF[n]=$PORT; stack_port; API_PORT[n]=$PORT; done
    # Patroni (as postgres) creates the data directories here, and reads its
    # own copy of the configuration wherever the checkout is.
    mkdir -p "$ROOT/pg"
    if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$ROOT/pg"; fi
    cp deploy/patroni.yml "$ROOT/patroni.yml"
    chmod 644 "$ROOT/patroni.yml"
    patroni_start 0
    until patroni_is_primary 0; do
        [ "$SECONDS" -lt "$deadline" ] || { echo "node1 did not bootstrap" >&2; return 1; }
        sleep 0.2
    done
    patroni_start 1
    patroni_wait_pair
}

# patroni_start N: node N's Patroni, in a process group of its own.
patroni_start() {
    local n=$1 as_owner=()
    if [ "$(id -u)" = 0 ]; then as_owner=(setpriv --reuid=postgres --regid=postgres --init-groups); fi
    # setsid: the group's id is the process's id, so one kill reaches it
    # (setpriv and Patroni exec in place). Patroni starts Postgres in a
    # session of its own: that group is pg_group's.
    PATRONI_NAME=${NODE_NAME[n]} PATRONI_ETCD3_HOSTS=$ETCD_HOSTS \
    PATRONI_RESTAPI_LISTEN=127.0.0.1:${API_PORT[n]} PATRONI_RESTAPI_CONNECT_ADDRESS=127.0.0.1:${API_PORT[n]} \
    PATRONI_POSTGRESQL_LISTEN=127.0.0.1:${PG_PORT_OF[n]} PATRONI_POSTGRESQL_CONNECT_ADDRESS=127.0.0.1:${PG_PORT_OF[n]} \
    PATRONI_POSTGRESQL_DATA_DIR=$ROOT/pg/${NODE_NAME[n]} PATRONI_POSTGRESQL_BIN_DIR=$PG_BIN \
    PATRONI_POSTGRESQL_PGPASS=$ROOT/pg/pgpass-${NODE_NAME[n]} \
    PATRONI_SUPERUSER_USERNAME=postgres PATRONI_SUPERUSER_PASSWORD=postgres \
    PATRONI_REPLICATION_USERNAME=replicator PATRONI_REPLICATION_PASSWORD=replicator \
    PATRONI_LOG_LEVEL=INFO HOME=$ROOT/pg \
        setsid "${as_owner[@]}" "$PATRONI" "$ROOT/patroni.yml" >>"$STACK_LOGS/patroni-${NODE_NAME[n]}.log" 2>&1 &
    PATRONI_PGID[n]=$!
}

# patroni_members: one line per member as Patroni sees it in etcd:
# "name role state" (roles Leader, Sync_Standby, Replica).
patroni_members() {
    patronictl list -f json 2>/dev/null |
        python3 -c 'import json, sys
for m in json.load(sys.stdin): print(m["Member"], m["Role"].replace(" ", "_"), m["State"])' || true
}
patroni_index() { [ "$1" = node1 ] && echo 0 || echo 1; }
# patroni_leader: the name of the running leader, or nothing.
patroni_leader() { patroni_members | awk '$2 == "Leader" && $3 == "running" { print $1 }'; }
patroni_is_primary() { curl -fsS -o /dev/null -m 1 "http://127.0.0.1:${API_PORT[$1]}/primary" 2>/dev/null; }

# patroni_wait_pair: until there is a running leader whose /primary answers
# and the other node streams as its synchronous standby (90 s at most).
# Sets LEADER (index).
patroni_wait_pair() {
    local deadline=$((SECONDS + 90)) m l
    while :; do
        m=$(patroni_members)
        l=$(echo "$m" | awk '$2 == "Leader" && $3 == "running" { print $1 }')
        if [ -n "$l" ] && echo "$m" | grep -q "Sync_Standby streaming" && patroni_is_primary "$(patroni_index "$l")"; then
            LEADER=$(patroni_index "$l"); return 0
        fi
        [ "$SECONDS" -lt "$deadline" ] || { echo "no leader with a synchronous standby within 90 s:" >&2; echo "$m" >&2; return 1; }
        sleep 0.2
    done
}

# patroni_wait_new_leader OLD: until the other node holds the leader key
# (sets T_LEADER, ms) and answers /primary (T_PRIMARY), 90 s at most.
patroni_wait_new_leader() {
    local old=$1 new=$((1 - $1)) deadline=$((SECONDS + 90))
    T_LEADER=""
    while :; do
        if [ -z "$T_LEADER" ] && [ "$(patroni_leader)" = "${NODE_NAME[new]}" ]; then T_LEADER=$(now_ms); fi
        if patroni_is_primary "$new"; then
            T_PRIMARY=$(now_ms)
            [ -n "$T_LEADER" ] || T_LEADER=$T_PRIMARY
            return 0
        fi
        [ "$SECONDS" -lt "$deadline" ] || { echo "${NODE_NAME[new]} did not take over from ${NODE_NAME[old]} within 90 s" >&2; return 1; }
        sleep 0.1
    done
}

# pgfront_up [LOG]: HAProxy's Postgres front (deploy/haproxy-postgres.cfg)
# on a new port, logging to LOG (default: nowhere); waits until it reaches
# the leader. Sets PGFRONT_PORT.
pgfront_up() {
    local log=${1:-/dev/null} deadline=$((SECONDS + 30))
    stack_port; PGFRONT_PORT=$PORT
    PAYRAIL_PG_BIND=127.0.0.1:$PGFRONT_PORT \
    PAYRAIL_PG1=127.0.0.1:${PG_PORT_OF[0]} PAYRAIL_PG2=127.0.0.1:${PG_PORT_OF[1]} \
    PAYRAIL_PATRONI1_ADDR=127.0.0.1 PAYRAIL_PATRONI1_PORT=${API_PORT[0]} \
    PAYRAIL_PATRONI2_ADDR=127.0.0.1 PAYRAIL_PATRONI2_PORT=${API_PORT[1]} \
        haproxy -db -f deploy/haproxy-postgres.cfg >"$log" 2>&1 &
    STACK_PIDS+=("$!")
    until "$PG_BIN/psql" -X -q -A -t -h 127.0.0.1 -p "$PGFRONT_PORT" -U postgres -d postgres -c "SELECT 1" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || { echo "the Postgres front does not reach the leader" >&2; return 1; }
        sleep 0.2
    done
}

now_ms() { echo $((${EPOCHREALTIME/./} / 1000)); }
