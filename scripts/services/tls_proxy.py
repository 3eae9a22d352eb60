#!/usr/bin/env python3
"""A TLS-terminating proxy for dpone's TLS tests (standard library only).

    tls_proxy.py --port P --upstream HOST:PORT --cert server.pem --key server.key [--postgres]

Accepts TLS on 127.0.0.1:P with the given certificate and forwards the
decrypted bytes to the plain upstream. With --postgres it first speaks
PostgreSQL's SSLRequest preamble (8 bytes; the server answers 'S', then the
client starts TLS), as a PostgreSQL server with `ssl = on` does; a client
that does not ask for TLS is refused, as `hostssl`-only servers do.

It lets the tests reach the machine's PostgreSQL and the private ClickHouse
over TLS without reconfiguring either. One thread pair per connection;
connections close when either side closes.
"""
import argparse
import socket
import ssl
import struct
import sys
import threading

SSL_REQUEST = 80877103


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise ConnectionError("closed during the preamble")
        buf += part
    return buf


def serve(conn, args, context):
    try:
        conn.settimeout(30)
        if args.postgres:
            length, code = struct.unpack("!ii", recv_exact(conn, 8))
            if length != 8 or code != SSL_REQUEST:
                conn.close()
                return
            conn.sendall(b"S")
        tls = context.wrap_socket(conn, server_side=True)
        tls.settimeout(None)
        host, port = args.upstream.rsplit(":", 1)
        upstream = socket.create_connection((host, int(port)), timeout=30)
        upstream.settimeout(None)
    except (OSError, ConnectionError, ssl.SSLError, struct.error):
        # A refused handshake (e.g. a client that does not trust our CA)
        # ends here; the client reports it.
        try:
            conn.close()
        except OSError:
            pass
        return
    threading.Thread(target=pump, args=(tls, upstream), daemon=True).start()
    pump(upstream, tls)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--upstream", required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--postgres", action="store_true")
    args = p.parse_args()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(64)
    print(f"tls_proxy: 127.0.0.1:{args.port} -> {args.upstream}", file=sys.stderr, flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn, args, context), daemon=True).start()


if __name__ == "__main__":
    main()
