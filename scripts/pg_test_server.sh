#!/usr/bin/env bash
# A throwaway PostgreSQL server for tests, from Debian's postgresql package:
# a private data directory, 127.0.0.1 on a free port (no Unix socket), trust
# authentication for the `mxval` role (loopback only), no fsync.
#
#   scripts/pg_test_server.sh start DIR [OWNER_PID]  # prints a libpq conninfo for it
#   scripts/pg_test_server.sh stop DIR               # stops it and removes DIR
#
# With OWNER_PID, a detached watcher stops the server once that process is
# gone, even if it was killed before it could clean up.
#
# PostgreSQL refuses to run as root: as root the server runs as the
# `postgres` user the package creates.
set -euo pipefail
cmd=${1:?start|stop}
dir=${2:?directory}
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$bin" ]; then
  echo "pg_test_server: no PostgreSQL under /usr/lib/postgresql (run scripts/setup.sh)" >&2
  exit 1
fi
as_pg() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
case "$cmd" in
  start)
    mkdir -p "$dir"
    chmod 700 "$dir"
    if [ "$(id -u)" -eq 0 ]; then chown postgres "$dir"; fi
    as_pg "$bin/initdb" -D "$dir/data" -U mxval --auth=trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 || {
      cat "$dir/initdb.log" >&2
      exit 1
    }
    for _ in 1 2 3 4 5; do
      port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
      if as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -s \
          -o "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
          start; then
        if [ -n "${3:-}" ]; then
          setsid nohup bash -c 'while kill -0 "$1" 2>/dev/null && [ -d "$2/data" ]; do sleep 2; done; bash "$3" stop "$2"' \
            _ "$3" "$dir" "$(readlink -f "$0")" >/dev/null 2>&1 </dev/null &
        fi
        echo "host=127.0.0.1 port=$port user=mxval dbname=postgres connect_timeout=10"
        exit 0
      fi
    done
    echo "pg_test_server: the server did not start; log:" >&2
    cat "$dir/server.log" >&2 || true
    exit 1
    ;;
  stop)
    if [ -f "$dir/data/postmaster.pid" ]; then as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -s -w stop || true; fi
    rm -rf "$dir"
    ;;
  *)
    echo "usage: $0 start|stop DIR" >&2
    exit 2
    ;;
esac
