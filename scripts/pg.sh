# Shell helpers for a private PostgreSQL cluster (sourced by scripts/test and
# the benchmark and chaos scripts). As root the server runs as `postgres`,
# because Postgres refuses to run as root.

pg_bin_dir() {
    if [ -n "${PAYRAIL_PG_BIN:-}" ]; then echo "$PAYRAIL_PG_BIN"; return; fi
    local newest
    newest=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    if [ -n "$newest" ] && [ -x "$newest/initdb" ]; then echo "$newest"; return; fi
    if command -v pg_config >/dev/null; then pg_config --bindir; return; fi
    echo "no PostgreSQL binaries found: install the postgresql package or set PAYRAIL_PG_BIN" >&2
    return 1
}

pg_as_owner() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# pg_private_cluster PARENT_DIR [fsync-off]: initdb + start; sets PG_BIN,
# PG_DATA, PG_PORT and an EXIT trap that stops the server and deletes it.
pg_private_cluster() {
    local parent=$1 durability=${2:-durable}
    PG_BIN=$(pg_bin_dir)
    PG_ROOT=$(mktemp -d "$parent/payrail-pg.XXXXXX")
    chmod 755 "$PG_ROOT"
    PG_DATA="$PG_ROOT/data"
    PG_PORT=$(pg_free_port)
    mkdir -p "$PG_DATA"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$PG_DATA"
    pg_as_owner "$PG_BIN/initdb" -D "$PG_DATA" -U postgres -A trust -E UTF8 --no-sync >"$PG_ROOT/initdb.log"
    {
        echo "listen_addresses = '127.0.0.1'"
        echo "unix_socket_directories = ''"
        echo "max_connections = 300"
        if [ "$durability" = fsync-off ]; then
            # Unsafe only on an OS crash. synchronous_commit stays on: off, a
            # killed server would lose commits it had already acknowledged.
            echo "fsync = off"; echo "full_page_writes = off"
        fi
    } >>"$PG_DATA/postgresql.conf"
    trap pg_private_cluster_cleanup EXIT
    pg_as_owner "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_DATA/server.log" -o "-p $PG_PORT" -w -t 60 start >/dev/null
}

pg_private_cluster_cleanup() {
    pg_as_owner "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$PG_ROOT"
}
