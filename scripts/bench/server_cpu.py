"""CPU seconds used so far by the benchmark's servers, from /proc (standard
library only; used by bench_util.py server-cpu): the PostgreSQL server
(postmaster, its live and its ended backends) and the ClickHouse server (the
process listening on the URL's port). A server not on this machine is
None ("-")."""

import os
import urllib.parse

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "")


def proc_cpu(pid, children=True):
    """utime + stime (+ cutime + cstime: the ended children it waited for),
    in seconds, of process `pid` (all its threads); None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            s = f.read()
    except OSError:
        return None
    v = s[s.rindex(")") + 2:].split()
    ticks = int(v[11]) + int(v[12]) + ((int(v[13]) + int(v[14])) if children else 0)
    return ticks / os.sysconf("SC_CLK_TCK")


def processes():
    """(pid, ppid, comm) of every process."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", encoding="ascii", errors="replace") as f:
                s = f.read()
        except OSError:
            continue
        out.append((int(d), int(s[s.rindex(")") + 2:].split()[1]), s[s.index("(") + 1:s.rindex(")")]))
    return out


def pg_server_cpu(url):
    """The local PostgreSQL server's CPU seconds so far: the postmaster's own
    and its ended children's (reaped at once), plus each live backend's."""
    host = pg_host(url)
    if host not in LOCAL_HOSTS and not host.startswith("/"):
        return None
    procs = processes()
    pg = {pid for pid, _, comm in procs if comm == "postgres"}
    masters = [pid for pid, ppid, comm in procs if comm == "postgres" and ppid not in pg]
    if len(masters) != 1:
        return None
    total = proc_cpu(masters[0])
    for pid, ppid, _ in procs:
        if ppid == masters[0]:
            total += proc_cpu(pid, children=False) or 0.0
    return total


def ch_server_cpu(url):
    """The CPU seconds so far of the local process listening on the
    ClickHouse URL's port (threads and waited-for children included)."""
    u = urllib.parse.urlsplit(url)
    if (u.hostname or "") not in LOCAL_HOSTS:
        return None
    port = u.port or (8443 if u.scheme == "https" else 8123)
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                next(f)
                for line in f:
                    v = line.split()
                    if v[3] == "0A" and int(v[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                        inodes.add(v[9])
        except OSError:
            pass
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{d}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{d}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in inodes:
                return proc_cpu(int(d))
    return None


def pg_host(url):
    u = urllib.parse.urlsplit(url)
    q = urllib.parse.parse_qs(u.query)
    return u.hostname or q.get("host", [""])[0]


def server_cpu(pg_url, ch_url):
    print(" ".join("-" if v is None else f"{v:.2f}" for v in (pg_server_cpu(pg_url), ch_server_cpu(ch_url))))
