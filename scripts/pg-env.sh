# Sourced by scripts that need a throwaway PostgreSQL cluster. Provides:
#   apt_install PKG...    install Debian packages (as root, or through sudo)
#   pg_ensure_installed   install PostgreSQL from Debian when initdb is missing
#   pg_start DIR          initdb + start a cluster in DIR on a free port; exports PGPUSH_TEST_DATABASE_URL
#   pg_stop DIR           stop the cluster and remove DIR
# initdb and postgres refuse to run as root, so they run as the unprivileged `postgres` user.

pg_bindir() {
    if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then
        pg_config --bindir
        return
    fi
    local dir
    dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    [ -n "$dir" ] && echo "$dir"
}

# Installs Debian packages, through sudo unless running as root.
apt_install() {
    local sudo=
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

pg_ensure_installed() {
    if [ -z "$(pg_bindir)" ]; then
        echo "pgpush: initdb not found; installing PostgreSQL from Debian" >&2
        apt_install postgresql
    fi
    PG_BIN=$(pg_bindir)
    [ -n "$PG_BIN" ] || { echo "pgpush: PostgreSQL installation failed" >&2; return 1; }
    export PG_BIN
}

# The HTTP/2 engine's C library (libnghttp2, the CNGHTTP2 system library target): its headers and pkg-config
# file, which every build needs.
nghttp2_ensure_installed() {
    if ! pkg-config --exists libnghttp2 2>/dev/null; then
        echo "pgpush: libnghttp2 headers not found; installing libnghttp2-dev and pkg-config from Debian" >&2
        apt_install libnghttp2-dev pkg-config
    fi
}

pg_free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

pg_as_owner() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

pg_start() {
    local dir=$1
    local port
    port=$(pg_free_port)
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$dir"
    chmod 700 "$dir"
    pg_as_owner "$PG_BIN/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; return 1; }
    cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 300
shared_buffers = 256MB
fsync = off
synchronous_commit = off
full_page_writes = off
log_min_messages = warning
CONF
    # Members of pgpush_password_auth log in with a password, so tests can see what a wrong one prints;
    # everyone else by trust. Written in place, so the file keeps its owner.
    local hba
    hba=$(cat "$dir/data/pg_hba.conf")
    printf '%s\n%s\n' "host all +pgpush_password_auth 127.0.0.1/32 scram-sha-256" "$hba" >"$dir/data/pg_hba.conf"
    pg_as_owner "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null \
        || { cat "$dir/server.log" >&2; return 1; }
    export PGPUSH_TEST_PG_PORT=$port
    export PGPUSH_TEST_PG_DIR=$dir
    export PGPUSH_TEST_PG_BIN=$PG_BIN
    export PGPUSH_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres"
}

pg_stop() {
    local dir=$1
    [ -d "$dir/data" ] && pg_as_owner "$PG_BIN/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1
    rm -rf "$dir"
}

# PgBouncer in front of the throwaway cluster, as production runs it. Two instances, both wildcard (`*`, so every
# test's own database is reachable by name): one in transaction pooling with 4 server connections per database,
# and one in session pooling, the kind of URL LISTEN needs.
#   pgbouncer_ensure_installed        install Debian's pgbouncer when missing
#   pgbouncer_start DIR PG_PORT       start both; exports PGPUSH_TEST_PGBOUNCER_PORT, PGPUSH_TEST_PGBOUNCER_SESSION_PORT
#   pgbouncer_stop DIR
pgbouncer_ensure_installed() {
    if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ]; then
        echo "pgpush: pgbouncer not found; installing it from Debian" >&2
        apt_install pgbouncer
    fi
    PGBOUNCER_BIN=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
    export PGBOUNCER_BIN
}

# pgbouncer_write_ini FILE PORT POOL_MODE PG_PORT DIR: a generated ini (also used by the failover test).
pgbouncer_write_ini() {
    local file=$1 port=$2 mode=$3 pg_port=$4 dir=$5
    cat >"$file" <<INI
[databases]
* = host=127.0.0.1 port=$pg_port user=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = any
pool_mode = $mode
default_pool_size = 4
max_client_conn = 1000
max_db_connections = 0
server_lifetime = 3600
logfile = $dir/pgbouncer-$mode.log
pidfile = $dir/pgbouncer-$mode.pid
admin_users = postgres
ignore_startup_parameters =
INI
}

pgbouncer_start() {
    local dir=$1 pg_port=$2 mode port
    for mode in transaction session; do
        port=$(pg_free_port)
        pgbouncer_write_ini "$dir/pgbouncer-$mode.ini" "$port" "$mode" "$pg_port" "$dir"
        [ "$(id -u)" = 0 ] && chown postgres:postgres "$dir/pgbouncer-$mode.ini"
        pg_as_owner "$PGBOUNCER_BIN" -d "$dir/pgbouncer-$mode.ini" >/dev/null 2>&1 \
            || { cat "$dir/pgbouncer-$mode.log" >&2; return 1; }
        if [ "$mode" = transaction ]; then export PGPUSH_TEST_PGBOUNCER_PORT=$port; else export PGPUSH_TEST_PGBOUNCER_SESSION_PORT=$port; fi
    done
}

pgbouncer_stop() {
    local dir=$1 mode
    for mode in transaction session; do
        [ -f "$dir/pgbouncer-$mode.pid" ] && kill "$(cat "$dir/pgbouncer-$mode.pid")" 2>/dev/null
    done
    return 0
}
