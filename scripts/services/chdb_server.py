#!/usr/bin/env python3
"""Serve a real ClickHouse (26.9) over HTTP from the chdb-core wheel.

The chdb-core wheel embeds a full ClickHouse engine. Importing the `chdb`
package starts a different embedded engine mode, so this launcher loads only
the extension module `_chdb` and asks it to start its HTTP listener, then keeps
that listener alive with a query that sleeps for ~30 years. See
/work/shared/CLICKHOUSE-NOTES.md ("Serving a real ClickHouse over HTTP").

One process per data folder (ClickHouse locks it). Exits 0 on SIGTERM/SIGINT,
non-zero if the engine stops serving on its own.

Usage: chdb_server.py --port N --data-dir DIR --run-dir DIR
"""

import argparse
import ctypes
import importlib.machinery
import importlib.util
import os
import signal
import sys
import threading
from xml.sax.saxutils import escape

# RTLD_DEEPBIND: the engine must bind to its own copies of the symbols it
# shares with the Python interpreter and other loaded libraries.
RTLD_DEEPBIND = 0x8

# The listener lives only while a query runs inside this process, so run one
# that never ends on its own (sleeps 1 s per row over a billion rows).
SERVE_SQL = (
    "SYSTEM START LISTEN HTTP; "
    "SELECT sleepEachRow(1) FROM numbers(1000000000) FORMAT Null "
    "SETTINGS max_block_size=1, function_sleep_max_microseconds_per_block=0, "
    "max_execution_time=0"
)


def log(msg):
    print(f"chdb_server[{os.getpid()}]: {msg}", file=sys.stderr, flush=True)


def write_config(run_dir, port):
    # The engine reads ./config.xml from its working directory. Only the
    # listener is required; the error log is there so that a failing test can
    # be diagnosed (chdb ignores <level>: a <log> file would get trace output,
    # whereas <errorlog> receives warnings and errors only).
    err_log = escape(os.path.join(run_dir, "clickhouse-server.err.log"))
    config = (
        "<clickhouse>\n"
        "  <listen_host>127.0.0.1</listen_host>\n"
        f"  <http_port>{port}</http_port>\n"
        f"  <logger><errorlog>{err_log}</errorlog></logger>\n"
        "</clickhouse>\n"
    )
    with open(os.path.join(run_dir, "config.xml"), "w", encoding="utf-8") as f:
        f.write(config)


def load_engine():
    """Load chdb's `_chdb` extension without importing the `chdb` package."""
    spec = importlib.util.find_spec("chdb")  # locates, does not import
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"chdb_server: chdb-core is not installed for {sys.executable}")
    pkg_dir = spec.submodule_search_locations[0]
    so_path = os.path.join(pkg_dir, "_chdb.abi3.so")
    if not os.path.isfile(so_path):
        sys.exit(f"chdb_server: {so_path} is missing")

    # The extension finds its helper libraries (libpybind11nonlimitedapi_*)
    # relative to the working directory, so load it from inside its folder.
    os.chdir(pkg_dir)
    ctypes.CDLL(so_path, mode=sys.getdlopenflags() | RTLD_DEEPBIND)
    loader = importlib.machinery.ExtensionFileLoader("_chdb", so_path)
    module_spec = importlib.util.spec_from_file_location("_chdb", so_path, loader=loader)
    module = importlib.util.module_from_spec(module_spec)
    loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True, help="HTTP port on 127.0.0.1")
    parser.add_argument("--data-dir", required=True, help="ClickHouse data folder (disposable)")
    parser.add_argument("--run-dir", required=True, help="folder for config.xml and the error log")
    args = parser.parse_args()

    # Absolute paths first: load_engine() changes the working directory.
    data_dir = os.path.abspath(args.data_dir)
    run_dir = os.path.abspath(args.run_dir)
    os.makedirs(data_dir, exist_ok=True)
    os.makedirs(run_dir, exist_ok=True)
    write_config(run_dir, args.port)

    engine = load_engine()
    os.chdir(run_dir)

    stop = threading.Event()

    def on_signal(signum, _frame):
        log(f"got signal {signum}, stopping")
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    # A shell starts background jobs with SIGINT ignored so that Ctrl-C reaches
    # only the foreground command (and its cleanup trap stops us). Keep that.
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, on_signal)

    outcome = {}

    def serve():
        try:
            outcome["result"] = engine.query(SERVE_SQL, "TabSeparated", path=data_dir)
        except BaseException as exc:  # report whatever ended the listener
            outcome["error"] = exc

    # query() blocks for as long as we serve but releases the GIL, so running
    # it in a thread leaves the main thread free to handle signals.
    server = threading.Thread(target=serve, name="chdb-http", daemon=True)
    server.start()
    log(f"serving ClickHouse HTTP on 127.0.0.1:{args.port}, data in {data_dir}")

    while server.is_alive() and not stop.wait(0.5):
        pass

    if stop.is_set():
        # The serving query cannot be interrupted from here, and the engine's
        # teardown while a query still runs is not something to wait for: the
        # data folder is disposable, so leave at once without destructors.
        log("stopped")
        os._exit(0)

    # The listener ended by itself: someone killed the query, or the engine
    # failed (a port already in use shows up here).
    if "error" in outcome:
        log(f"ClickHouse stopped serving: {outcome['error']!r}")
    else:  # the engine has already printed its own error message above
        log("ClickHouse stopped serving (see the message above and "
            f"{os.path.join(run_dir, 'clickhouse-server.err.log')})")
    os._exit(1)


if __name__ == "__main__":
    main()
