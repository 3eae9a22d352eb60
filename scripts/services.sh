#!/usr/bin/env bash
# Start and stop the servers that dpone's tests talk to.
#
#   scripts/services.sh start    start everything (idempotent), write env.sh
#   scripts/services.sh stop     stop what `start` started, remove its data
#   scripts/services.sh status   show what is running
#   scripts/services.sh env      print the export lines for the test variables
#
# Servers:
#   - PostgreSQL at 127.0.0.1:5432: a machine service. Started if it is down,
#     never stopped here.
#   - ClickHouse 26.9 served from the PyPI wheel chdb-core (pinned), from a
#     virtualenv cached in $DPONE_CACHE_DIR.
#   - ClickHouse 18.16 from Debian (installed with apt if missing): an old
#     server without EXCHANGE, to prove dpone refuses such targets.
#   - TLS endpoints (scripts/services/tls_proxy.py, Python's standard
#     library): https in front of ClickHouse 26.9 and PostgreSQL's TLS
#     (SSLRequest, then TLS) in front of the machine's PostgreSQL, with a
#     certificate signed by a CA generated per start (openssl), plus a second
#     CA that signed nothing (the "wrong CA" of the tests).
# Both ClickHouse servers listen on free loopback ports and keep all their
# state in $DPONE_SERVICES_DIR, so several sets can run side by side.
#
# Environment:
#   DPONE_SERVICES_DIR      state folder (default ${TMPDIR:-/tmp}/dpone-services);
#                           `start` and `stop` must see the same value
#   DPONE_CACHE_DIR         cache folder (default $HOME/.cache/dpone), holds the
#                           chdb virtualenv (~560 MB on disk)
#   DPONE_SERVICES_TIMEOUT  seconds to wait for each server (default 60)
#   DPONE_SERVICES_KEEP_LOGS=1  make `stop` keep the server logs
#
# Typical use outside scripts/test.sh:
#   scripts/services.sh start && eval "$(scripts/services.sh env)" && cargo test
set -euo pipefail

SCRIPTS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CHDB_VERSION=26.9.0
STATE_DIR=${DPONE_SERVICES_DIR:-${TMPDIR:-/tmp}/dpone-services}
# ${HOME:-~}: a CI environment may lack HOME; ~ then comes from passwd.
CACHE_DIR=${DPONE_CACHE_DIR:-${HOME:-~}/.cache/dpone}
VENV=$CACHE_DIR/chdb-$CHDB_VERSION-venv
TIMEOUT=${DPONE_SERVICES_TIMEOUT:-60}
PG_HOST=127.0.0.1
PG_PORT=${DPONE_PG_PORT:-5432} # overridable only to test this script itself
PG_URL=postgresql://postgres@$PG_HOST:$PG_PORT/test
OLD_CH_BIN=/usr/sbin/clickhouse-server # Debian ships the server in sbin
# The two ClickHouse servers this script runs; each gets $STATE_DIR/<name>/.
SERVICES=(chdb ch18)
# The TLS proxies; each gets $STATE_DIR/<name>/ too, certificates $STATE_DIR/tls/.
PROXIES=(chtls pgtls)

log() { echo "services: $*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- helpers --

# A process we started may linger as a zombie until its new parent reaps it;
# it no longer serves anything, so count it as gone.
pid_alive() {
  local state
  kill -0 "$1" 2>/dev/null || return 1
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

# Guard against PID reuse: every server we start names a path inside
# $STATE_DIR on its command line.
pid_is_ours() {
  tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$STATE_DIR/"
}

# A free loopback port, picked by the OS (bind to port 0) and released for
# the server to take. A server that loses the race for it fails to bind, and
# start_with_retries tries again with a fresh port.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Wait until $1/ping answers "Ok.". Returns 1 on timeout, 2 if process $2
# died first (e.g. its port was taken meanwhile).
wait_for_ping() {
  local url=$1 pid=$2 deadline=$((SECONDS + TIMEOUT))
  while :; do
    [ "$(curl -sS --max-time 2 "$url/ping" 2>/dev/null)" = "Ok." ] && return 0
    pid_alive "$pid" || return 2
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}

show_logs() {
  local f
  for f in "$@"; do
    [ -s "$f" ] || continue
    echo "----- last lines of $f" >&2
    tail -n 40 "$f" >&2
  done
}

# SIGTERM, up to 10 s to exit, then SIGKILL.
stop_pid() {
  local name=$1 pid=$2 i
  pid_alive "$pid" || return 0
  if ! pid_is_ours "$pid"; then
    log "$name: pid $pid is not one of ours any more, leaving it alone"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    pid_alive "$pid" || { log "$name: stopped (pid $pid)"; return 0; }
    sleep 0.2
  done
  log "$name: pid $pid ignored SIGTERM for 10 s, sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 25; i++)); do
    pid_alive "$pid" || return 0
    sleep 0.2
  done
  log "$name: pid $pid survived SIGKILL"
  return 1
}

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# ------------------------------------------------------------- PostgreSQL --

ensure_postgres() {
  local i cluster
  if pg_isready -q -h "$PG_HOST" -p "$PG_PORT"; then
    log "postgres: running at $PG_HOST:$PG_PORT"
  else
    command -v pg_ctlcluster >/dev/null || die "PostgreSQL is not installed (no pg_ctlcluster)"
    # The cluster configured for our port ("15 main"), else <version> main.
    cluster=$(pg_lsclusters -h 2>/dev/null | awk -v p="$PG_PORT" '$3 == p { print $1, $2; exit }')
    # shellcheck disable=SC2012 # version folders are plain numbers
    [ -n "$cluster" ] || cluster="$(ls /etc/postgresql 2>/dev/null | head -n 1) main"
    [ "$cluster" != " main" ] || die "no PostgreSQL cluster found in /etc/postgresql"
    log "postgres: not accepting connections, starting cluster $cluster"
    # --skip-systemctl-redirect: there is no systemd on these machines.
    # shellcheck disable=SC2086 # $cluster is "<version> <name>"
    as_root pg_ctlcluster --skip-systemctl-redirect $cluster start ||
      log "postgres: pg_ctlcluster failed; waiting anyway in case it is starting"
    for ((i = 0; i < TIMEOUT * 5; i++)); do
      pg_isready -q -h "$PG_HOST" -p "$PG_PORT" && break
      sleep 0.2
    done
    pg_isready -q -h "$PG_HOST" -p "$PG_PORT" ||
      die "postgres: still not accepting connections at $PG_HOST:$PG_PORT after ${TIMEOUT}s"
    log "postgres: started"
  fi
  # The tests connect to database `test`; a machine that lost it gets it back.
  if [ "$(psql -h "$PG_HOST" -p "$PG_PORT" -U postgres -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = 'test'")" != 1 ]; then
    log "postgres: creating database test"
    psql -h "$PG_HOST" -p "$PG_PORT" -U postgres -d postgres -qc "CREATE DATABASE test" >/dev/null
  fi
}

# ---------------------------------------------------- ClickHouse 26.9 (chdb) --

venv_is_valid() {
  [ -f "$VENV/.dpone-ready" ] && "$VENV/bin/python" - "$CHDB_VERSION" <<'EOF' 2>/dev/null
import importlib.metadata, importlib.util, os, sys
assert importlib.metadata.version("chdb-core") == sys.argv[1]
spec = importlib.util.find_spec("chdb")  # must not import chdb
assert os.path.isfile(os.path.join(spec.submodule_search_locations[0], "_chdb.abi3.so"))
EOF
}

ensure_chdb_venv() {
  mkdir -p "$CACHE_DIR"
  # Two test runs on a cold cache must not build the same venv at once.
  exec 8>"$CACHE_DIR/chdb-$CHDB_VERSION-venv.lock"
  flock 8
  if venv_is_valid; then
    log "chdb: using cached venv $VENV"
  else
    log "chdb: creating venv $VENV with chdb-core==$CHDB_VERSION (~180 MB download)"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    # --no-deps: the HTTP server needs only the engine, not pandas/pyarrow.
    # --no-cache-dir: this venv is the cache; a pip cache would double it.
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
      --no-cache-dir --no-deps "chdb-core==$CHDB_VERSION"
    # Written last: a venv without it (an interrupted install) is rebuilt.
    touch "$VENV/.dpone-ready"
    venv_is_valid || die "chdb: venv $VENV is unusable after install"
  fi
  exec 8>&-
}

# Launch one attempt; prints the pid. stdin/stdout/stderr are detached so
# that the server never holds a caller's pipe open (a CI log would hang).
launch_chdb() {
  local dir=$1 port=$2
  rm -rf "$dir/data" "$dir/run"
  mkdir -p "$dir/data" "$dir/run"
  nohup "$VENV/bin/python" -u "$SCRIPTS_DIR/services/chdb_server.py" \
    --port "$port" --data-dir "$dir/data" --run-dir "$dir/run" \
    </dev/null >"$dir/server.log" 2>&1 &
  echo $!
}

# ------------------------------------------------- ClickHouse 18.16 (Debian) --

ensure_old_clickhouse_installed() {
  [ -x "$OLD_CH_BIN" ] && return 0
  log "ch18: installing Debian's clickhouse-server (18.16)"
  local apt_log=$STATE_DIR/apt.log
  # Lock::Timeout: a parallel run may be installing the same packages.
  local install=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q
    -o DPkg::Lock::Timeout=300
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold
    clickhouse-server clickhouse-client)
  # Try without `apt-get update` first: it is slow and usually not needed.
  if ! as_root "${install[@]}" >"$apt_log" 2>&1; then
    log "ch18: install failed, running apt-get update and retrying"
    if ! { as_root apt-get update -q -o DPkg::Lock::Timeout=300 &&
      as_root "${install[@]}"; } >>"$apt_log" 2>&1; then
      show_logs "$apt_log"
      die "ch18: could not install clickhouse-server"
    fi
  fi
  [ -x "$OLD_CH_BIN" ] || die "ch18: $OLD_CH_BIN missing after install"
}

# No user switch: 18.16 starts as root without complaint (checked on 18.16.1),
# and its data folder is ours.
launch_ch18() {
  local dir=$1 port=$2
  rm -rf "$dir/conf" "$dir/data" "$dir/log"
  python3 "$SCRIPTS_DIR/services/old_clickhouse_config.py" --port "$port" --dir "$dir"
  (cd "$dir" && exec nohup "$OLD_CH_BIN" --config-file="$dir/conf/config.xml" \
    </dev/null >"$dir/server.log" 2>&1) &
  echo $!
}

# ------------------------------------------------------------ TLS proxies --

# A CA, a server certificate it signs (localhost and 127.0.0.1), and a
# second CA that signed nothing. EC keys: fast to make; valid for 2 days.
make_certificates() {
  local dir=$STATE_DIR/tls ext
  command -v openssl >/dev/null || as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=300 openssl >/dev/null
  rm -rf "$dir"
  mkdir -p "$dir"
  ext=$dir/server.ext
  printf '%s\n' "subjectAltName=DNS:localhost,IP:127.0.0.1" "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" >"$ext"
  local ca
  for ca in ca wrong-ca; do
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
      -subj "/CN=dpone test $ca" -keyout "$dir/$ca.key" -out "$dir/$ca.pem" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  done
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=localhost" \
    -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -days 2 -extfile "$ext" -out "$dir/server.pem" 2>/dev/null
  [ -s "$dir/server.pem" ] || die "tls: could not make the test certificates"
}

# Start proxy $1 in front of $2 (host:port), with extra flags $3...
start_proxy() {
  local name=$1 upstream=$2 dir=$STATE_DIR/$1 port pid i
  shift 2
  mkdir -p "$dir"
  port=$(free_port)
  nohup python3 -u "$SCRIPTS_DIR/services/tls_proxy.py" --port "$port" --upstream "$upstream" \
    --cert "$STATE_DIR/tls/server.pem" --key "$STATE_DIR/tls/server.key" "$@" \
    </dev/null >"$dir/server.log" 2>&1 &
  pid=$!
  echo "$pid" >"$dir/pid"
  for ((i = 0; i < TIMEOUT * 5; i++)); do
    if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 1)" "$port" 2>/dev/null; then
      echo "$port" >"$dir/port"
      log "$name: TLS at 127.0.0.1:$port -> $upstream (pid $pid)"
      return 0
    fi
    pid_alive "$pid" || break
    sleep 0.2
  done
  show_logs "$dir/server.log"
  die "$name: the TLS proxy did not start"
}

start_tls() {
  make_certificates
  start_proxy chtls "127.0.0.1:$(cat "$STATE_DIR/chdb/port")"
  start_proxy pgtls "$PG_HOST:$PG_PORT" --postgres
  # End to end: the ClickHouse server answers through TLS, our CA trusted.
  [ "$(curl -sS --max-time 5 --cacert "$STATE_DIR/tls/ca.pem" "https://127.0.0.1:$(cat "$STATE_DIR/chtls/port")/ping")" = "Ok." ] ||
    die "chtls: ClickHouse does not answer over TLS"
}

# -------------------------------------------------------- start / stop --

# Start service $1 on a free port, retrying with a fresh port when the server
# dies before answering (most likely someone took the port in between).
start_with_retries() {
  local name=$1 dir=$STATE_DIR/$1 attempt port pid rc
  mkdir -p "$dir"
  for attempt in 1 2 3; do
    port=$(free_port)
    pid=$("launch_$name" "$dir" "$port")
    echo "$pid" >"$dir/pid"
    rc=0
    wait_for_ping "http://127.0.0.1:$port" "$pid" || rc=$?
    if [ "$rc" -eq 0 ]; then
      echo "$port" >"$dir/port"
      log "$name: ready at http://127.0.0.1:$port (pid $pid)"
      return 0
    fi
    show_logs "$dir/server.log" "$dir/run/clickhouse-server.err.log" \
      "$dir/log/clickhouse-server.err.log"
    stop_pid "$name" "$pid" || true
    rm -f "$dir/pid"
    if [ "$rc" -eq 1 ]; then
      die "$name: no answer on port $port within ${TIMEOUT}s"
    fi
    log "$name: exited before answering on port $port (attempt $attempt of 3)"
  done
  die "$name: could not be started"
}

service_url() {
  local port
  port=$(cat "$STATE_DIR/$1/port" 2>/dev/null) || return 1
  echo "http://127.0.0.1:$port"
}

all_running() {
  local name pid
  [ -f "$STATE_DIR/env.sh" ] || return 1
  for name in "${SERVICES[@]}"; do
    [ -f "$STATE_DIR/$name/pid" ] && [ -f "$STATE_DIR/$name/port" ] || return 1
    pid=$(cat "$STATE_DIR/$name/pid")
    pid_alive "$pid" && pid_is_ours "$pid" || return 1
    [ "$(curl -sS --max-time 2 "$(service_url "$name")/ping" 2>/dev/null)" = "Ok." ] || return 1
  done
  for name in "${PROXIES[@]}"; do
    [ -f "$STATE_DIR/$name/pid" ] && [ -f "$STATE_DIR/$name/port" ] || return 1
    pid=$(cat "$STATE_DIR/$name/pid")
    pid_alive "$pid" && pid_is_ours "$pid" || return 1
  done
}

write_env() {
  local tmp=$STATE_DIR/env.sh.tmp
  cat >"$tmp" <<EOF
export DPONE_TEST_CLICKHOUSE_URL=$(service_url chdb)
export DPONE_TEST_CLICKHOUSE_OLD_URL=$(service_url ch18)
export DPONE_TEST_POSTGRES_URL=$PG_URL
export DPONE_TEST_REQUIRE_SERVERS=1
export DPONE_SERVICES_DIR=$STATE_DIR
export DPONE_TEST_CHDB_PYTHON=$VENV/bin/python
export DPONE_TEST_CHDB_LAUNCHER=$SCRIPTS_DIR/services/chdb_server.py
export DPONE_TEST_TLS_CA=$STATE_DIR/tls/ca.pem
export DPONE_TEST_TLS_WRONG_CA=$STATE_DIR/tls/wrong-ca.pem
export DPONE_TEST_CLICKHOUSE_TLS_URL=https://127.0.0.1:$(cat "$STATE_DIR/chtls/port")
export DPONE_TEST_POSTGRES_TLS_URL=postgresql://postgres@127.0.0.1:$(cat "$STATE_DIR/pgtls/port")/test
EOF
  mv "$tmp" "$STATE_DIR/env.sh"
}

cmd_start() {
  mkdir -p "$STATE_DIR"
  STATE_DIR=$(cd "$STATE_DIR" && pwd) # absolute: servers see it on their command lines
  if all_running; then
    log "already running (state in $STATE_DIR)"
    return 0
  fi
  # Leftovers of an earlier run (a crash, a half start) go first.
  cmd_stop quiet
  mkdir -p "$STATE_DIR"
  # A failed start must not leave half the servers running.
  trap 'rc=$?; if [ "$rc" -ne 0 ]; then log "start failed, stopping what was started"; cmd_stop; fi' EXIT

  ensure_postgres
  ensure_chdb_venv
  ensure_old_clickhouse_installed
  start_with_retries chdb
  start_with_retries ch18
  start_tls
  write_env
  trap - EXIT
  log "all servers up; environment in $STATE_DIR/env.sh"
}

cmd_stop() {
  local name pid quiet=${1:-}
  [ -d "$STATE_DIR" ] || { [ -n "$quiet" ] || log "nothing to stop in $STATE_DIR"; return 0; }
  STATE_DIR=$(cd "$STATE_DIR" && pwd)
  for name in "${PROXIES[@]}" "${SERVICES[@]}"; do
    if [ -f "$STATE_DIR/$name/pid" ]; then
      pid=$(cat "$STATE_DIR/$name/pid")
      stop_pid "$name" "$pid"
      rm -f "$STATE_DIR/$name/pid"
    fi
    # Remove only what this script created: $STATE_DIR may be a folder the
    # caller chose, with other files in it.
    rm -rf "$STATE_DIR/$name/data" "$STATE_DIR/$name/port" "$STATE_DIR/$name/conf"
    if [ "${DPONE_SERVICES_KEEP_LOGS:-0}" != 1 ]; then
      rm -rf "$STATE_DIR/$name/run" "$STATE_DIR/$name/log" "$STATE_DIR/$name/server.log"
      rmdir "$STATE_DIR/$name" 2>/dev/null || true
    fi
  done
  rm -rf "$STATE_DIR/tls"
  rm -f "$STATE_DIR/env.sh" "$STATE_DIR/env.sh.tmp" "$STATE_DIR/apt.log"
  rmdir "$STATE_DIR" 2>/dev/null || true
}

cmd_status() {
  local name pid url
  [ -d "$STATE_DIR" ] || { echo "not running (no $STATE_DIR)"; return 1; }
  for name in "${SERVICES[@]}" "${PROXIES[@]}"; do
    pid=$(cat "$STATE_DIR/$name/pid" 2>/dev/null || true)
    url=$(service_url "$name" 2>/dev/null || echo "?")
    if [ -n "$pid" ] && pid_alive "$pid"; then
      echo "$name: running, pid $pid, $url"
    else
      echo "$name: not running"
    fi
  done
  if pg_isready -q -h "$PG_HOST" -p "$PG_PORT"; then
    echo "postgres: running, $PG_URL"
  else
    echo "postgres: not accepting connections at $PG_HOST:$PG_PORT"
  fi
  all_running
}

cmd_env() {
  [ -f "$STATE_DIR/env.sh" ] || die "not started: no $STATE_DIR/env.sh (run: $0 start)"
  cat "$STATE_DIR/env.sh"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) cmd_env ;;
  *)
    echo "usage: $0 start|stop|status|env" >&2
    exit 2
    ;;
esac
