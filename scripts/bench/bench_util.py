#!/usr/bin/env python3
"""Small helpers for the scripts in scripts/bench/ (standard library only).

  bench_util.py pg-parts URL          host, port, user, password, dbname: one per line
  bench_util.py dpone-result OUT      one JSON line summarizing a `dpone run --format json`
                                      output file and the evidence file it points to
  bench_util.py cpu-busy SECONDS      percent of all CPUs busy over SECONDS (from /proc/stat)
  bench_util.py server-cpu PG_URL CH_URL
                                      CPU seconds used so far by the PostgreSQL server (postmaster,
                                      its live and its ended backends) and the ClickHouse server
                                      (the process listening on CH_URL's port), "PG CH"; "-" for a
                                      server not on this machine
  bench_util.py report META JSONL OUT writes the results JSON to OUT and prints Markdown
  bench_util.py meta KEY=JSON...       machine description plus the given keys, as JSON
  bench_util.py dataset-json TMP NAME ROWS FIELD=SUFFIX[:int|:bool]...
                                      a dataset's description from the files TMP/NAME.SUFFIX
  bench_util.py report-memory META JSONL CHECKS OUT
                                      the same for scripts/bench/memory.sh
  bench_util.py run-error OUT          "<error_code> <messages>" of a `dpone run --format json` output
  bench_util.py rss-sample EXE STOP OUT
                                      until the file STOP exists, samples /proc/<pid>/status
                                      of every process running EXE every 50 ms; writes the
                                      maxima of VmRSS, RssAnon, RssFile as JSON to OUT
  bench_util.py report-ch2pg META JSONL OUT
                                      the same for scripts/bench/ch_to_postgres.sh
  bench_util.py report-changed-delivery META JSONL CHECKS OUT
                                      the same for scripts/bench/changed_delivery.sh
"""

import json
import os
import statistics
import sys
import time
import urllib.parse

from server_cpu import server_cpu  # scripts/bench/server_cpu.py

# dpone's whole run must stay within this factor of the slower raw reference.
TARGETS = {"narrow": 1.25, "wide": 1.5}
RAW_CASES = ("raw_pg_copy", "raw_ch_insert")
CASE_LABELS = {
    "raw_pg_copy": "raw: psql COPY (FORMAT binary) > /dev/null",
    "raw_ch_insert": "raw: curl RowBinary INSERT (file)",
    "ch_postgresql_fn": "ClickHouse INSERT ... SELECT FROM postgresql()",
    "dpone_empty": "dpone run, empty target",
    "dpone_empty_xxh3": "dpone run, empty target, digest xxh3_128",
    "dpone_rerun": "dpone run, re-run replacing the window",
    "raw_pg_copy_noidx": "raw: psql COPY (FORMAT binary), source without index on ts",
    "ch_postgresql_fn_noidx": "ClickHouse postgresql() pull, source without index on ts",
    "dpone_empty_noidx": "dpone run, empty target, source without index on ts",
}
# dpone's run against ClickHouse's own postgresql() pull of the same source
# table (issue 14: at most 1.0x).
PGFN_PAIRS = (("dpone_empty", "ch_postgresql_fn"), ("dpone_empty_xxh3", "ch_postgresql_fn"),
              ("dpone_empty_noidx", "ch_postgresql_fn_noidx"))
PHASES = ("extract", "load", "verify", "prepare", "publish", "evidence", "wall")
# The dpone cases of the phases table, in order (both routes).
DPONE_CASES = ("dpone_empty", "dpone_empty_xxh3", "dpone_rerun", "dpone_empty_noidx", "dpone_direct", "dpone_direct_rerun")
# issue 14: the empty-target run with `execution.verification.digest:
# xxh3_128` (the case) next to the same run with the default sha256 digest.
XXH3_PAIR = ("dpone_empty_xxh3", "dpone_empty")


def pg_parts(url):
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("postgres", "postgresql"):
        sys.exit(f"bench_util: not a postgresql:// URL: scheme {u.scheme!r}")
    q = urllib.parse.parse_qs(u.query)
    host = u.hostname or q.get("host", ["127.0.0.1"])[0]
    port = str(u.port or q.get("port", ["5432"])[0])
    user = urllib.parse.unquote(u.username or q.get("user", ["postgres"])[0])
    password = urllib.parse.unquote(u.password or q.get("password", [""])[0])
    dbname = (u.path or "/").lstrip("/") or q.get("dbname", [user])[0]
    for part in (host, port, user, password, dbname):
        if "\n" in part:
            sys.exit("bench_util: a PostgreSQL URL part contains a newline")
        print(part)


def dpone_result(path):
    with open(path, encoding="utf-8") as f:
        run = json.load(f)
    out = {
        "status": run.get("status"),
        "rows": run.get("inserted_rows"),
        "final_rows": run.get("final_rows"),
        "replaced_rows": run.get("replaced_rows"),
        "publication": run.get("publication"),
        "duration_seconds": run.get("duration_seconds"),
        "evidence_path": run.get("evidence_path"),
        "error_code": run.get("error_code"),
    }
    # Changed-window delivery: the chunks this run staged, and the decisions.
    out["staged"] = sorted(c.get("index") for c in run.get("chunks") or [] if c.get("index") is not None)
    delivery = run.get("delivery")
    if delivery:
        decided = delivery.get("chunks") or []
        counts = {}
        for c in decided:
            counts[c.get("decision")] = counts.get(c.get("decision"), 0) + 1
        out["delivery"] = {
            "authority": delivery.get("authority"),
            "fingerprints_by": delivery.get("fingerprints_by"),
            "decisions": counts,
            "moved": [[c.get("index"), c.get("decision")] for c in decided if c.get("decision") != "unchanged"],
        }
    if run.get("errors"):
        out["errors"] = [{"code": e.get("code"), "message": e.get("message")} for e in run["errors"]]
    ev_path = run.get("evidence_path")
    if ev_path and os.path.exists(ev_path):
        with open(ev_path, encoding="utf-8") as f:
            ev = json.load(f)
        out["phases"] = ev.get("phases")
        chunks = ev.get("chunks") or []
        out["chunks"] = len(chunks)
        out["encoded_bytes"] = sum(c.get("encoded_bytes", 0) for c in chunks)
        out["chunk_seconds"] = [round(c.get("seconds", 0.0), 3) for c in chunks]
        limits = ev.get("limits") or {}
        out["parallelism"] = limits.get("parallelism", limits.get("encoding_parallelism"))
        out["limits"] = ev.get("limits")
        out["memory"] = ev.get("memory")
        g = ev.get("generation") or {}
        out["generation"] = {k: g.get(k) for k in ("verified_by", "partitions", "build_seconds", "kept_rows")}
        out["digest_algorithms"] = sorted(digest_algorithms(ev))
    print(json.dumps(out, separators=(",", ":")))


def digest_algorithms(value):
    """The `algorithm` tags of every digest anywhere in an evidence document."""
    found = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if isinstance(v.get("algorithm"), str):
                found.add(v["algorithm"])
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return found


def cpu_busy(seconds):
    def sample():
        with open("/proc/stat", encoding="ascii") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
        return sum(v), idle

    t0, i0 = sample()
    time.sleep(seconds)
    t1, i1 = sample()
    total = t1 - t0
    print(f"{(100.0 * (total - (i1 - i0)) / total) if total else 0.0:.1f}")


# ------------------------------------------------------------------ report --


def fmt(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


def summarize(samples):
    walls = [s["wall_s"] for s in samples]
    rss = [s["rss_kib"] / 1024.0 for s in samples]
    out = {
        "runs": len(samples),
        "wall_s": walls,
        "median_wall_s": statistics.median(walls),
        "min_wall_s": min(walls),
        "max_wall_s": max(walls),
        "peak_rss_mib_max": max(rss),
        "peak_rss_mib_median": statistics.median(rss),
        "load1_before": [s.get("load1") for s in samples],
        "cpu_busy_pct_before": [s.get("cpu_busy_pct") for s in samples],
    }
    out["median_client_cpu_s"] = statistics.median(s["user_s"] + s["sys_s"] for s in samples)
    for key in ("pg_server_cpu_s", "ch_server_cpu_s"):
        v = [s[key] for s in samples if s.get(key) is not None]
        out["median_" + key] = statistics.median(v) if len(v) == len(samples) else None
    phases = [s["dpone"]["phases"] for s in samples if s.get("dpone") and s["dpone"].get("phases")]
    if phases:
        out["median_phases_s"] = {p: statistics.median(ph[p] for ph in phases) for p in PHASES if p in phases[0]}
        # Not reported by dpone; derived per run, then the median.
        out["median_derived_s"] = {
            "rest": statistics.median(
                ph["wall"] - ph["prepare"] - ph["publish"] - ph["evidence"] for ph in phases
            ),
            "outside_engine": statistics.median(
                s["wall_s"] - s["dpone"]["phases"]["wall"] for s in samples if s.get("dpone")
            ),
        }
        d = [s["dpone"] for s in samples]
        out["encoded_bytes"] = d[0].get("encoded_bytes")
        out["chunks"] = d[0].get("chunks")
        out["parallelism"] = d[0].get("parallelism")
        out["digest_algorithms"] = sorted({a for x in d for a in x.get("digest_algorithms") or []})
    return out


def compare_cases(samples, name, raw_cases):
    """Summaries of dataset `name`'s successful cases, each with its ratio to
    the slower of `raw_cases`; the failed cases with their errors; the slower
    raw case and the raw medians (None and [] unless every raw case ran)."""
    by_case = {}
    for s in samples:
        if s["dataset"] == name and s.get("ok", True):
            by_case.setdefault(s["case"], []).append(s)
    cases = {c: summarize(v) for c, v in by_case.items()}
    failed = {s["case"]: s.get("error", "") for s in samples if s["dataset"] == name and not s.get("ok", True)}
    raw = [cases[c]["median_wall_s"] for c in raw_cases if c in cases]
    if len(raw) != len(raw_cases):
        raw = []
    slower_case = max(raw_cases, key=lambda c: cases[c]["median_wall_s"]) if raw else None
    slower = max(raw) if raw else None
    for v in cases.values():
        v["ratio_to_slower_raw"] = (v["median_wall_s"] / slower) if slower else None
    return cases, failed, slower_case, raw


def print_phases(datasets, title):
    """The Markdown table of dpone's median phases per dataset and run case."""
    print(title)
    print()
    print("| dataset | case | " + " | ".join(PHASES) + " | rest of wall | process wall | dpone CPU s |")
    print("|---|---|" + "---:|" * (len(PHASES) + 3))
    for name, d in datasets.items():
        for c in DPONE_CASES:
            v = d["cases"].get(c)
            if v and "median_phases_s" in v:
                ph = v["median_phases_s"]
                print(
                    f"| {name} | {c} | " + " | ".join(fmt(ph.get(p)) for p in PHASES)
                    + f" | {fmt(v['median_derived_s']['rest'])} | {fmt(v['median_wall_s'])}"
                    + f" | {fmt(v['median_client_cpu_s'])} |"
                )


def print_cpu(datasets, order, labels):
    """The Markdown table of the CPU seconds each process used per case
    (medians): the measured client, the PostgreSQL server, the ClickHouse
    server, and their sum over the wall time (CPUs kept busy)."""
    rows = []
    for name, d in datasets.items():
        for c in order:
            v = d["cases"].get(c)
            if not v:
                continue
            pg, ch = v.get("median_pg_server_cpu_s"), v.get("median_ch_server_cpu_s")
            total = None if pg is None or ch is None else v["median_client_cpu_s"] + pg + ch
            busy = None if total is None else total / v["median_wall_s"]
            rows.append(f"| {name} | {labels[c]} | {fmt(v['median_wall_s'])} | {fmt(v['median_client_cpu_s'])} | "
                        f"{fmt(pg)} | {fmt(ch)} | {fmt(total)} | {fmt(busy)} |")
    if not rows:
        return
    print("CPU seconds per case (medians; servers measured from /proc when they run on this machine, "
          "including their background work during the case):")
    print()
    print("| dataset | case | wall s | client CPU s | PostgreSQL server CPU s | ClickHouse server CPU s | sum | CPUs busy |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(r)
    print()


def xxh3_comparison(cases):
    """The xxh3_128 case against the sha256 one (medians): whole process and
    per phase; None unless both ran."""
    case, ref = XXH3_PAIR
    if case not in cases or ref not in cases:
        return None
    a, b = cases[case], cases[ref]
    out = {"case": case, "reference": ref, "ratio": a["median_wall_s"] / b["median_wall_s"],
           "median_wall_s": a["median_wall_s"], "reference_median_wall_s": b["median_wall_s"],
           "digest_algorithms": a.get("digest_algorithms"),
           "reference_digest_algorithms": b.get("digest_algorithms")}
    pa, pb = a.get("median_phases_s") or {}, b.get("median_phases_s") or {}
    out["phase_ratios"] = {p: (pa[p] / pb[p]) if pb[p] else None for p in PHASES if p in pa and p in pb}
    return out


def print_xxh3(datasets, labels):
    """One line per dataset: the xxh3_128 run against the sha256 run."""
    for name, d in datasets.items():
        v = d.get("xxh3_vs_sha256")
        if not v:
            continue
        pr = v["phase_ratios"]
        phases = ", ".join(f"{p} {fmt(pr.get(p))}x" for p in ("extract", "verify", "prepare", "publish") if p in pr)
        print(
            f"- {name}, {labels[v['case']]}: {fmt(v['ratio'])}x the sha256 run ({v['reference']}: "
            f"{fmt(v['median_wall_s'])} s against {fmt(v['reference_median_wall_s'])} s)"
            + (f"; phases {phases}" if phases else "")
        )
        algos = v.get("digest_algorithms")
        if algos is not None and not any("xxh3" in a for a in algos):
            print(f"- {name}: warning: the evidence of {v['case']} names no xxh3 digest ({', '.join(algos) or 'none'})")


def report(meta_path, jsonl_path, out_path):
    with open(meta_path, encoding="utf-8") as f:
        meta = json.load(f)
    samples = load_samples(jsonl_path)

    datasets = {}
    for ds in meta["datasets"]:
        name = ds["name"]
        cases, unavailable, slower_raw_case, raw = compare_cases(samples, name, RAW_CASES)
        slower_raw = max(raw) if raw else None
        verdicts = {}
        target = TARGETS.get(name)
        for c in ("dpone_empty", "dpone_rerun"):
            if c in cases and slower_raw and target:
                r = cases[c]["ratio_to_slower_raw"]
                verdicts[c] = {"target_ratio": target, "ratio": r, "met": r <= target}
        to_pgfn = {}
        for c, ref in PGFN_PAIRS:
            if c in cases and ref in cases:
                r = cases[c]["median_wall_s"] / cases[ref]["median_wall_s"]
                to_pgfn[c] = {"reference": ref, "ratio": r, "target_ratio": 1.0, "met": r <= 1.0}
        datasets[name] = {
            "rows": ds["rows"],
            "slower_raw_reference": slower_raw_case,
            "slower_raw_median_s": slower_raw,
            "cases": cases,
            "unavailable": unavailable,
            "verdicts": verdicts,
            "ratio_to_postgresql_fn": to_pgfn,
            "xxh3_vs_sha256": xxh3_comparison(cases),
        }

    result = {"meta": meta, "datasets": datasets, "samples": samples}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
        f.write("\n")

    # ---- Markdown on stdout
    m = meta
    print(f"## dpone PostgreSQL -> ClickHouse benchmark ({m['started_utc']})")
    print()
    print(
        f"- machine: {m['machine']['nproc']} CPUs ({m['machine']['cpu_model']}), "
        f"{m['machine']['mem_total_mib']} MiB RAM"
    )
    print(
        f"- PostgreSQL {m['versions']['postgres_server']} (psql {m['versions']['psql']}), "
        f"ClickHouse {m['versions']['clickhouse']}"
    )
    dirty = "dirty working tree" if m["git"]["dirty"] else "clean working tree"
    print(f"- dpone commit {m['git']['commit']} ({dirty}), parallelism {m['parallelism']}, repeat {m['repeat']}")
    print(f"- results: {out_path}")
    print()
    print("| dataset | case | median wall s | min-max s | peak RSS MiB | ratio to slower raw |")
    print("|---|---|---:|---:|---:|---:|")
    order = ("raw_pg_copy", "raw_ch_insert", "ch_postgresql_fn", "dpone_empty", "dpone_empty_xxh3", "dpone_rerun",
             "raw_pg_copy_noidx", "ch_postgresql_fn_noidx", "dpone_empty_noidx")
    for name, d in datasets.items():
        label = f"{name} ({d['rows']:,} rows)"
        for c in order:
            if c in d["cases"]:
                v = d["cases"][c]
                print(
                    f"| {label} | {CASE_LABELS[c]} | {fmt(v['median_wall_s'])} | "
                    f"{fmt(v['min_wall_s'])}-{fmt(v['max_wall_s'])} | {fmt(v['peak_rss_mib_max'], 0)} | "
                    f"{fmt(v['ratio_to_slower_raw'])}x |"
                )
            elif c in d["unavailable"]:
                print(f"| {label} | {CASE_LABELS[c]} | not available | | | |")
    print()
    print_cpu(datasets, order, CASE_LABELS)
    print_phases(datasets, "dpone phases (median seconds; extract, load and verify are summed over chunks, "
                 "which run in parallel, so they overlap each other and the wall time):")
    print()
    print("rest of wall = wall - prepare - publish - evidence (derived): probe, snapshot, staging and "
          "verifying every chunk, backup housekeeping; process wall = /usr/bin/time of the whole command; "
          "dpone CPU = user + system seconds of the dpone process.")
    print()
    for name, d in datasets.items():
        if not d["verdicts"]:
            print(f"- {name}: no verdict (a raw reference or the dpone case is missing)")
            continue
        for c, v in d["verdicts"].items():
            met = "MET" if v["met"] else "NOT MET"
            print(
                f"- {name}, {CASE_LABELS[c]}: {fmt(v['ratio'])}x the slower raw reference "
                f"({d['slower_raw_reference']}, {fmt(d['slower_raw_median_s'])} s); target <= {v['target_ratio']}x: {met}"
            )
    for name, d in datasets.items():
        for c, v in d.get("ratio_to_postgresql_fn", {}).items():
            met = "MET" if v["met"] else "NOT MET"
            print(f"- {name}, {CASE_LABELS[c]}: {fmt(v['ratio'])}x ClickHouse's own postgresql() pull ({v['reference']}); "
                  f"target <= 1.0x: {met}")
    print_xxh3(datasets, CASE_LABELS)
    loads = [s.get("load1") for s in samples if s.get("load1") is not None]
    busy = [s.get("cpu_busy_pct") for s in samples if s.get("cpu_busy_pct") is not None]
    if loads:
        limit = meta.get("idle_wait", {}).get("busy_below_pct", 30)
        n_busy = sum(1 for b in busy if b >= limit)
        print(
            f"- load average (1 min) before measurements: min {min(loads):.2f}, max {max(loads):.2f}; "
            f"CPU busy in the second before each measurement (bench idle): "
            f"min {min(busy):.0f}%, median {statistics.median(busy):.0f}%, max {max(busy):.0f}%; "
            f"{n_busy} of {len(busy)} measurements started with the CPUs >= {limit}% busy"
        )
        if n_busy:
            print("- the machine was busy with other work during part of this run: timings are disturbed")


# ------------------------------------------------------- memory.sh, ch_to_postgres.sh --


def meta(pairs):
    def read(path):
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except OSError:
            return ""

    cpu = next((l.split(":", 1)[1].strip() for l in read("/proc/cpuinfo").splitlines() if l.startswith("model name")), "unknown")
    mem = next((int(l.split()[1]) // 1024 for l in read("/proc/meminfo").splitlines() if l.startswith("MemTotal")), None)
    import platform

    out = {"machine": {"nproc": os.cpu_count(), "cpu_model": cpu, "mem_total_mib": mem, "kernel": platform.release()}}
    versions = {}
    git = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        v = json.loads(value)
        if key in ("psql", "postgres_server", "clickhouse", "dpone"):
            versions[key] = v
        elif key in ("commit", "dirty", "built_from", "changed_paths", "diff_sha256_16"):
            git[key] = v
        else:
            out[key] = v
    out["versions"] = versions
    out["git"] = git
    print(json.dumps(out, indent=2))


def dataset_json(tmp, name, rows, fields):
    """One dataset's description for the results JSON: name, rows and, per
    FIELD=SUFFIX[:int|:bool], the content of TMP/NAME.SUFFIX (missing: "",
    0 or null)."""
    def read(suffix):
        try:
            with open(f"{tmp}/{name}.{suffix}", encoding="utf-8") as f:
                return f.read().strip()
        except OSError:
            return ""

    out = {"name": name, "rows": int(rows)}
    for spec in fields:
        key, _, rest = spec.partition("=")
        suffix, _, kind = rest.partition(":")
        v = read(suffix)
        out[key] = int(v or 0) if kind == "int" else {"1": True, "0": False}.get(v) if kind == "bool" else v
    print(json.dumps(out))


def run_error(path):
    try:
        with open(path, encoding="utf-8") as f:
            o = json.load(f)
    except (OSError, ValueError):
        print("unparsable -")
        return
    msgs = [e.get("message", "") for e in o.get("errors") or []]
    print(o.get("error_code"), " | ".join(msgs).replace("\n", " "))


def rss_sample(exe, stop, out_path):
    exe = os.path.realpath(exe)
    pids = set()
    seen = set()
    peak = {"samples": 0, "max_vmrss_kib": 0, "max_rss_anon_kib": 0, "max_rss_file_kib": 0,
            "rss_anon_kib_at_max_vmrss": None, "rss_file_kib_at_max_vmrss": None, "max_threads": 0}
    last_scan = 0.0
    while not os.path.exists(stop):
        now = time.monotonic()
        if not pids and now - last_scan > 0.05:
            last_scan = now
            for d in os.listdir("/proc"):
                if d.isdigit() and d not in seen:
                    try:
                        if os.readlink(f"/proc/{d}/exe") == exe:
                            pids.add(d)
                        else:
                            seen.add(d)
                    except OSError:
                        seen.add(d)
        for pid in list(pids):
            try:
                with open(f"/proc/{pid}/status", encoding="ascii") as f:
                    st = {l.split(":")[0]: l.split()[1] for l in f if ":" in l and len(l.split()) > 1}
            except OSError:
                pids.discard(pid)
                seen.add(pid)
                continue
            rss, anon, file_ = int(st.get("VmRSS", 0)), int(st.get("RssAnon", 0)), int(st.get("RssFile", 0))
            peak["samples"] += 1
            peak["max_threads"] = max(peak["max_threads"], int(st.get("Threads", 0)))
            peak["max_rss_anon_kib"] = max(peak["max_rss_anon_kib"], anon)
            peak["max_rss_file_kib"] = max(peak["max_rss_file_kib"], file_)
            if rss > peak["max_vmrss_kib"]:
                peak.update(max_vmrss_kib=rss, rss_anon_kib_at_max_vmrss=anon, rss_file_kib_at_max_vmrss=file_)
        time.sleep(0.05)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(peak, f)


def load_samples(jsonl_path):
    samples = []
    with open(jsonl_path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                samples.append(json.loads(line))
    return samples


def header(m, title, out_path):
    print(f"## {title} ({m['started_utc']})")
    print()
    print(
        f"- machine: {m['machine']['nproc']} CPUs ({m['machine']['cpu_model']}), "
        f"{m['machine']['mem_total_mib']} MiB RAM"
    )
    print(
        f"- PostgreSQL {m['versions']['postgres_server']} ({m['versions']['psql']}), "
        f"ClickHouse {m['versions']['clickhouse']}"
    )
    dirty = "dirty working tree" if m["git"]["dirty"] else "clean"
    print(f"- dpone commit {m['git']['commit']} ({m['git']['built_from']}, {dirty}), repeat {m.get('repeat')}")
    print(f"- results: {out_path}")
    print()


def load_note(samples, meta):
    loads = [s.get("load1") for s in samples if s.get("load1") is not None]
    busy = [s.get("cpu_busy_pct") for s in samples if s.get("cpu_busy_pct") is not None]
    if not loads:
        return
    limit = meta.get("idle_wait", {}).get("busy_below_pct", 30)
    n_busy = sum(1 for b in busy if b >= limit)
    print(
        f"- load average (1 min) before measurements: min {min(loads):.2f}, max {max(loads):.2f}; "
        f"CPU busy in the second before each measurement (bench idle): "
        f"min {min(busy):.0f}%, median {statistics.median(busy):.0f}%, max {max(busy):.0f}%; "
        f"{n_busy} of {len(busy)} measurements started with the CPUs >= {limit}% busy"
    )
    if n_busy:
        print("- the machine was busy with other work during part of this run: timings are disturbed")


MIB = 1024.0 * 1024.0
# memory.sh ROUTE: the Markdown label.
ROUTE_LABELS = {"pg_to_clickhouse": "PostgreSQL -> ClickHouse", "ch_to_postgres": "ClickHouse -> PostgreSQL"}


def mem_field(samples, key):
    vals = [((s.get("dpone") or {}).get("memory") or {}).get(key) for s in samples]
    return [v for v in vals if v is not None]


def report_memory(meta_path, jsonl_path, checks_path, out_path):
    with open(meta_path, encoding="utf-8") as f:
        m = json.load(f)
    with open(checks_path, encoding="utf-8") as f:
        checks = json.load(f)
    samples = load_samples(jsonl_path)
    target_mib = m["targets"]["rss_max_mib"]
    flat_pct = m["targets"]["rss_flat_pct"]
    # issue 14's own bound (both routes); results written before it had none.
    issue_mib = m["targets"].get("issue_rss_max_mib")
    route = m.get("route", "pg_to_clickhouse")

    sizes = []
    for size in m["sizes"]:
        ss = [s for s in samples if s["dataset"] == size["table"] and s["case"] == "dpone_empty"]
        ok = [s for s in ss if s.get("ok")]
        row = {"table": size["table"], "rows": size["rows"], "runs": len(ss), "failed_runs": len(ss) - len(ok)}
        if ok:
            walls = [s["wall_s"] for s in ok]
            rss = [s["rss_kib"] / 1024.0 for s in ok]
            row.update({
                "median_wall_s": statistics.median(walls), "min_wall_s": min(walls), "max_wall_s": max(walls),
                "peak_rss_mib_max": max(rss), "peak_rss_mib_median": statistics.median(rss),
                "peak_rss_mib_all": rss,
                "evidence_process_peak_rss_mib_max": max((v / MIB for v in mem_field(ok, "process_peak_rss_bytes")), default=None),
                "payload_budget_bytes": max(mem_field(ok, "payload_budget_bytes"), default=None),
                "payload_budget_peak_reserved_bytes_max": max(mem_field(ok, "payload_budget_peak_reserved_bytes"), default=None),
                "budget_waits_max": max(mem_field(ok, "budget_waits"), default=None),
                "budget_waits_all": mem_field(ok, "budget_waits"),
                "sampled_max_rss_anon_mib": max((s["rss_sampled"]["max_rss_anon_kib"] / 1024.0 for s in ok if s.get("rss_sampled")), default=None),
                "sampled_max_rss_file_mib": max((s["rss_sampled"]["max_rss_file_kib"] / 1024.0 for s in ok if s.get("rss_sampled")), default=None),
                "median_phases_s": {p: statistics.median(s["dpone"]["phases"][p] for s in ok) for p in PHASES}
                if all((s.get("dpone") or {}).get("phases") for s in ok) else None,
            })
        sizes.append(row)

    measured = [r for r in sizes if "peak_rss_mib_max" in r]
    verdict = {"route": route, "rss_max_mib_target": target_mib, "rss_flat_pct_target": flat_pct,
               "issue_rss_max_mib_target": issue_mib}
    if measured and len(measured) == len(sizes):
        lo = min(r["peak_rss_mib_max"] for r in measured)
        hi = max(r["peak_rss_mib_max"] for r in measured)
        spread = 100.0 * (hi - lo) / lo
        verdict.update({
            "rss_min_mib": lo, "rss_max_mib": hi, "rss_spread_pct": spread,
            "flat_met": spread <= flat_pct, "bound_met": hi <= target_mib,
        })
        verdict["met"] = verdict["flat_met"] and verdict["bound_met"]
        if issue_mib is not None:
            verdict["issue_bound_met"] = hi <= issue_mib
            verdict["issue_met"] = verdict["flat_met"] and verdict["issue_bound_met"]
    else:
        verdict["met"] = False
        if issue_mib is not None:
            verdict["issue_met"] = False
        verdict["note"] = "a size has no successful run"

    big = {}
    for case in ("dpone_bigvalue_default", "dpone_bigvalue_raised"):
        ss = [s for s in samples if s["case"] == case]
        if ss:
            big[case] = {
                "runs": len(ss),
                "exit_codes": [s.get("exit_code") for s in ss],
                "error_codes": [(s.get("dpone") or {}).get("error_code") for s in ss],
                "messages": [[e.get("message") for e in (s.get("dpone") or {}).get("errors", [])] for s in ss],
                "median_wall_s": statistics.median(s["wall_s"] for s in ss),
                "peak_rss_mib_max": max(s["rss_kib"] / 1024.0 for s in ss),
                "peak_rss_mib_all": [s["rss_kib"] / 1024.0 for s in ss],
                "memory": [(s.get("dpone") or {}).get("memory") for s in ss],
                "limits": ((ss[0].get("dpone") or {}).get("limits")),
            }
    big_ok = bool(checks) and all(c["ok"] for c in checks)

    result = {"meta": m, "sizes": sizes, "verdict": verdict, "bigvalue": big, "bigvalue_checks": checks,
              "bigvalue_checks_all_ok": big_ok, "samples": samples}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
        f.write("\n")

    header(m, f"dpone memory benchmark: {ROUTE_LABELS.get(route, route)} (ROUTE={route}), default budget", out_path)
    print(f"- window P7D, chunk_interval {m['window']['chunk_interval']}, parallelism {m['parallelism']}, "
          f"native_chunks `{m['native_chunks_default']}`")
    print()
    print("| rows | table | runs | median wall s | min-max s | peak RSS MiB (max / median) | evidence process_peak_rss MiB | payload_budget MiB | budget peak reserved MiB | budget_waits | sampled max anon / file MiB |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in sizes:
        if "peak_rss_mib_max" not in r:
            print(f"| {r['rows']:,} | {r['table']} | {r['runs']} | failed | | | | | | | |")
            continue
        pb = r["payload_budget_bytes"]
        pr = r["payload_budget_peak_reserved_bytes_max"]
        print(
            f"| {r['rows']:,} | {r['table']} | {r['runs']} | {fmt(r['median_wall_s'])} | "
            f"{fmt(r['min_wall_s'])}-{fmt(r['max_wall_s'])} | {fmt(r['peak_rss_mib_max'], 1)} / {fmt(r['peak_rss_mib_median'], 1)} | "
            f"{fmt(r['evidence_process_peak_rss_mib_max'], 1)} | {fmt(pb / MIB if pb is not None else None, 0)} | "
            f"{fmt(pr / MIB if pr is not None else None, 1)} | {r['budget_waits_max']} | "
            f"{fmt(r['sampled_max_rss_anon_mib'], 1)} / {fmt(r['sampled_max_rss_file_mib'], 1)} |"
        )
    print()
    print("peak RSS = /usr/bin/time %M of the dpone process (its VmHWM); sampled anon / file = the largest "
          "RssAnon (heap, stacks) and RssFile (mapped binary and libraries) seen by polling /proc every 50 ms "
          "(polling misses short peaks).")
    print()
    if "rss_spread_pct" in verdict:
        print(
            f"- peak RSS (max per size) {fmt(verdict['rss_min_mib'], 1)}-{fmt(verdict['rss_max_mib'], 1)} MiB: "
            f"spread {fmt(verdict['rss_spread_pct'], 1)}% (target <= {flat_pct}%: {'MET' if verdict['flat_met'] else 'NOT MET'}); "
            f"max {fmt(verdict['rss_max_mib'], 1)} MiB (target <= {target_mib} MiB: {'MET' if verdict['bound_met'] else 'NOT MET'})"
        )
        if issue_mib is not None:
            print(
                f"- issue 14's target on this route, flat within {flat_pct}% and at most {issue_mib} MiB: "
                f"{'MET' if verdict['issue_met'] else 'NOT MET'} (spread {fmt(verdict['rss_spread_pct'], 1)}%: "
                f"{'MET' if verdict['flat_met'] else 'NOT MET'}; max {fmt(verdict['rss_max_mib'], 1)} MiB <= {issue_mib} MiB: "
                f"{'MET' if verdict['issue_bound_met'] else 'NOT MET'})"
            )
    else:
        print(f"- memory target: NOT MET ({verdict.get('note')})")
        if issue_mib is not None:
            print(f"- issue 14's target (flat within {flat_pct}%, at most {issue_mib} MiB): NOT MET ({verdict.get('note')})")
    print()
    if not big and not checks:
        if route == "ch_to_postgres":
            print("Big value: not run (part 2 is PostgreSQL -> ClickHouse only; ROUTE=ch_to_postgres).")
        else:
            print("Big value: not run (BIGVALUE=0).")
        print()
        load_note(samples, m)
        return
    print("Big value (one ~10 MiB text value in the window):")
    print()
    print("| run | native_chunks | exit | error_code | median wall s | peak RSS MiB (max) | evidence process_peak_rss MiB | budget peak reserved MiB |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    labels = {"dpone_bigvalue_default": ("A: default budget", m.get("bigvalue_native_chunks", {}).get("default")),
              "dpone_bigvalue_raised": ("B: raised budget", m.get("bigvalue_native_chunks", {}).get("raised"))}
    for case, v in big.items():
        label, nc = labels[case]
        mems = [x for x in v["memory"] if x]
        ev_rss = max((x["process_peak_rss_bytes"] / MIB for x in mems if x.get("process_peak_rss_bytes")), default=None)
        ev_res = max((x["payload_budget_peak_reserved_bytes"] / MIB for x in mems), default=None)
        print(
            f"| {label} | `{nc}` | {','.join(str(x) for x in sorted(set(v['exit_codes'])))} | "
            f"{','.join(sorted({str(x) if x else '-' for x in v['error_codes']}))} | {fmt(v['median_wall_s'])} | {fmt(v['peak_rss_mib_max'], 1)} | "
            f"{fmt(ev_rss, 1)} | {fmt(ev_res, 1)} |"
        )
    print()
    for c in checks:
        print(f"- {'ok' if c['ok'] else 'FAILED'}: {c['check']}" + (f" ({c['detail']})" if c.get("detail") else ""))
    print()
    load_note(samples, m)


CH2PG_RAW = ("raw_ch_select", "raw_pg_copy_in")
CH2PG_LABELS = {
    "raw_ch_select": "raw: curl SELECT ... FORMAT RowBinary > /dev/null",
    "raw_pg_copy_in": "raw: psql \\copy FROM file (FORMAT binary)",
    "dpone_empty": "dpone run, empty target",
    "dpone_empty_xxh3": "dpone run, empty target, digest xxh3_128",
    "dpone_rerun": "dpone run, re-run replacing the window",
    "dpone_direct": "dpone run, empty target, publication: direct",
    "dpone_direct_rerun": "dpone run, re-run replacing the window, publication: direct",
}
CH2PG_ORDER = ("raw_ch_select", "raw_pg_copy_in", "dpone_empty", "dpone_empty_xxh3", "dpone_rerun", "dpone_direct",
               "dpone_direct_rerun")
# issue 14: dpone's run into an empty target at most this factor of the
# raw binary COPY FROM of the same rows.
CH2PG_TARGET = 1.5


def report_ch2pg(meta_path, jsonl_path, out_path):
    with open(meta_path, encoding="utf-8") as f:
        m = json.load(f)
    samples = load_samples(jsonl_path)
    datasets = {}
    for ds in m["datasets"]:
        name = ds["name"]
        cases, failed, slower_case, raw = compare_cases(samples, name, CH2PG_RAW)
        slower = max(raw) if raw else None
        for v in cases.values():
            v["ratio_to_sum_of_raw"] = (v["median_wall_s"] / sum(raw)) if slower else None
        datasets[name] = {"rows": ds["rows"], "slower_raw_reference": slower_case, "slower_raw_median_s": slower,
                          "sum_raw_median_s": sum(raw) if slower else None, "cases": cases, "failed": failed,
                          "xxh3_vs_sha256": xxh3_comparison(cases)}
    result = {"meta": m, "datasets": datasets, "samples": samples}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
        f.write("\n")

    header(m, "dpone ClickHouse -> PostgreSQL benchmark", out_path)
    print("| dataset | case | median wall s | min-max s | peak RSS MiB | ratio to slower raw | ratio to sum of raw |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, d in datasets.items():
        label = f"{name} ({d['rows']:,} rows)"
        for c in CH2PG_ORDER:
            if c in d["cases"]:
                v = d["cases"][c]
                print(
                    f"| {label} | {CH2PG_LABELS[c]} | {fmt(v['median_wall_s'])} | {fmt(v['min_wall_s'])}-{fmt(v['max_wall_s'])} | "
                    f"{fmt(v['peak_rss_mib_max'], 0)} | {fmt(v['ratio_to_slower_raw'])}x | {fmt(v['ratio_to_sum_of_raw'])}x |"
                )
            elif c in d["failed"]:
                print(f"| {label} | {CH2PG_LABELS[c]} | failed | | | | |")
    print()
    print_cpu(datasets, CH2PG_ORDER, CH2PG_LABELS)
    print_phases(datasets, "dpone phases (median seconds; extract, load and verify are summed over chunks and overlap):")
    print()
    for name, d in datasets.items():
        for c in ("dpone_empty", "dpone_empty_xxh3", "dpone_rerun", "dpone_direct", "dpone_direct_rerun"):
            v = d["cases"].get(c)
            if v and d["slower_raw_median_s"]:
                goal = (f"target at most {CH2PG_TARGET}x on an empty target: "
                        f"{'met' if v['ratio_to_slower_raw'] <= CH2PG_TARGET else 'NOT met'}") if c in (
                    "dpone_empty", "dpone_direct") else "no target ratio for this case"
                print(
                    f"- {name}, {CH2PG_LABELS[c]}: {fmt(v['ratio_to_slower_raw'])}x the slower raw reference "
                    f"({d['slower_raw_reference']}, {fmt(d['slower_raw_median_s'])} s); {goal}"
                )
    print_xxh3(datasets, CH2PG_LABELS)
    load_note(samples, m)


WINDOW_COST_GOALS = {"daily": 1.2, "monthly": 1.5}


def report_window_cost(meta_path, jsonl_path, out_path):
    """window_cost.sh: wall time and peak RSS per (layout, history), and the
    ratio of the largest history to the empty target against the goals."""
    with open(meta_path, encoding="utf-8") as f:
        meta = json.load(f)
    samples = load_samples(jsonl_path)
    history = meta["history"]
    layouts = {}
    for layout in meta["layouts"].split():
        points = {}
        for h in history:
            runs = [s for s in samples if s["dataset"] == layout and s["case"] == f"history_{h}" and s["ok"]]
            if runs:
                points[str(h)] = summarize(runs)
                gen = [((r.get("dpone") or {}).get("generation") or {}) for r in runs]
                points[str(h)]["generation"] = gen[0] if gen else None
        verdict = None
        lo, hi = str(min(history)), str(max(history))
        if lo in points and hi in points and lo != hi:
            ratio = points[hi]["median_wall_s"] / points[lo]["median_wall_s"]
            goal = WINDOW_COST_GOALS.get(layout)
            verdict = {"ratio_largest_to_empty": ratio, "goal": goal, "met": None if goal is None else ratio <= goal}
        layouts[layout] = {"points": points, "verdict": verdict}
    result = {"meta": meta, "layouts": layouts, "samples": samples}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    header(meta, "dpone window cost: a 7-day window into targets with history", out_path)
    print(f"- window: {meta['window_rows']:,} rows from PostgreSQL; history rows lie before the window")
    print()
    print("| layout | history rows | median wall s | min-max s | peak RSS MiB | vs empty target |")
    print("|---|---:|---:|---:|---:|---:|")
    for layout, d in layouts.items():
        base = d["points"].get(str(min(history)))
        for h in history:
            v = d["points"].get(str(h))
            if not v:
                print(f"| {layout} | {h:,} | failed | | | |")
                continue
            ratio = v["median_wall_s"] / base["median_wall_s"] if base else None
            print(
                f"| {layout} | {h:,} | {fmt(v['median_wall_s'])} | {fmt(v['min_wall_s'])}-{fmt(v['max_wall_s'])} | "
                f"{fmt(v['peak_rss_mib_max'], 0)} | {fmt(ratio)}x |"
            )
    print()
    for layout, d in layouts.items():
        v = d["verdict"]
        if not v:
            continue
        if v["goal"] is None:
            print(f"- {layout}: {fmt(v['ratio_largest_to_empty'])}x the empty-target run (reported for comparison)")
        else:
            met = "met" if v["met"] else "NOT met"
            print(f"- {layout}: {fmt(v['ratio_largest_to_empty'])}x the empty-target run; goal <= {v['goal']}x: {met}")
    load_note(samples, meta)


# changed_delivery.sh: the goals of issue 30, as ratios to the first run.
CHANGED_DELIVERY_GOALS = {"nochange": 0.10, "changed3": 0.25}
CHANGED_DELIVERY_CASES = ("first", "nochange", "changed3", "changed1", "all")
CHANGED_DELIVERY_LABELS = {
    "first": "first run (no records: every chunk)",
    "nochange": "rerun, no change",
    "changed3": "rerun, 3 days changed",
    "changed1": "rerun, 1 day changed (unpartitioned target: every chunk)",
    "all": "`--delivery all` (every chunk)",
}


def report_changed_delivery(meta_path, jsonl_path, checks_path, out_path):
    """changed_delivery.sh: per route, the first run, the no-change rerun and
    the rerun after three changed days, their ratios to the first run
    against the goals, the staged chunks and dpone's phases."""
    with open(meta_path, encoding="utf-8") as f:
        meta = json.load(f)
    samples = load_samples(jsonl_path)
    checks = []
    if os.path.exists(checks_path):
        with open(checks_path, encoding="utf-8") as f:
            checks = [json.loads(l) for l in f if l.strip()]
    routes = {}
    for route in meta["routes"].split():
        cases = {}
        for case in CHANGED_DELIVERY_CASES:
            runs = [s for s in samples if s["dataset"] == route and s["case"] == f"dpone_{case}" and s["ok"]]
            if not runs:
                continue
            v = summarize(runs)
            d = [r.get("dpone") or {} for r in runs]
            v["staged"] = [x.get("staged") for x in d]
            v["delivery"] = [x.get("delivery") for x in d]
            v["phases"] = [x.get("phases") for x in d]
            cases[case] = v
        verdicts = {}
        first = cases.get("first")
        for case, goal in CHANGED_DELIVERY_GOALS.items():
            if first and case in cases:
                ratio = cases[case]["median_wall_s"] / first["median_wall_s"]
                verdicts[case] = {"ratio_to_first": ratio, "goal": goal, "met": ratio <= goal}
        # Issue 43: into an unpartitioned target, `changed` never costs more than `all`.
        if "changed1" in cases and "all" in cases:
            ratio = cases["changed1"]["median_wall_s"] / cases["all"]["median_wall_s"]
            verdicts["changed1"] = {"ratio_to_all": ratio, "goal": 1.0, "met": ratio <= 1.0}
        routes[route] = {"rows": meta["rows"].get(route), "cases": cases, "verdicts": verdicts}
    result = {"meta": meta, "routes": routes, "checks": checks, "samples": samples}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    header(meta, "dpone changed-window delivery: reruns of a 30-day window", out_path)
    print(f"- window: 30 daily chunks; changes before the third run: {meta['changes']}")
    print("- exactness: after every run the target's window equals the source's in count() and sum(v)")
    print()
    print("| route | rows | case | wall s | ratio to first | staged chunks | fingerprint s (by) | peak RSS MiB | load1 before |")
    print("|---|---:|---|---:|---:|---|---:|---:|---:|")
    for route, r in routes.items():
        first = r["cases"].get("first")
        for case, v in r["cases"].items():
            ratio = v["median_wall_s"] / first["median_wall_s"] if first else None
            staged = v["staged"][0] if v["staged"] else None
            staged_s = "all 30" if staged is not None and len(staged) == 30 else ("none" if not staged else ", ".join(map(str, staged)))
            fp = [(p or {}).get("fingerprint") for p in v["phases"]]
            fp_s = "/".join(fmt(x) for x in fp if x is not None) or "-"
            by = sorted({(x or {}).get("fingerprints_by") for x in v["delivery"]} - {None})
            fp_s += f" ({', '.join(by)})" if by else ""
            walls = "/".join(fmt(w) for w in v["wall_s"])
            loads = "/".join(fmt(x) for x in v["load1_before"])
            print(
                f"| {ROUTE_LABELS.get(route, route)} | {r['rows']:,} | {CHANGED_DELIVERY_LABELS[case]} | {walls} | "
                f"{fmt(ratio)}x | {staged_s} | {fp_s} | {fmt(v['peak_rss_mib_max'], 1)} | {loads} |"
            )
    print()
    print("Phases from the evidence (seconds; extract/load/verify summed over chunks, they overlap):")
    print()
    names = []
    for r in routes.values():
        for v in r["cases"].values():
            for p in v["phases"]:
                for k in p or {}:
                    if k not in names:
                        names.append(k)
    print("| route | case | " + " | ".join(names) + " |")
    print("|---|---|" + "---:|" * len(names))
    for route, r in routes.items():
        for case, v in r["cases"].items():
            p = (v["phases"] or [None])[0] or {}
            print(f"| {ROUTE_LABELS.get(route, route)} | {case} | " + " | ".join(fmt(p.get(k)) if isinstance(p.get(k), (int, float)) else "-" for k in names) + " |")
    print()
    for route, r in routes.items():
        for case, v in r["verdicts"].items():
            met = "met" if v["met"] else "NOT met"
            against = f"{fmt(v['ratio_to_first'])}x the first run" if "ratio_to_first" in v else f"{fmt(v['ratio_to_all'])}x the `all` run"
            print(f"- {ROUTE_LABELS.get(route, route)}, {CHANGED_DELIVERY_LABELS[case]}: {against}; goal <= {v['goal']}x: {met}")
    load_note(samples, meta)


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    cmd, args = argv[1], argv[2:]
    if cmd == "pg-parts" and len(args) == 1:
        pg_parts(args[0])
    elif cmd == "dpone-result" and len(args) == 1:
        dpone_result(args[0])
    elif cmd == "cpu-busy" and len(args) == 1:
        cpu_busy(float(args[0]))
    elif cmd == "server-cpu" and len(args) == 2:
        server_cpu(*args)
    elif cmd == "report" and len(args) == 3:
        report(*args)
    elif cmd == "meta":
        meta(args)
    elif cmd == "dataset-json" and len(args) >= 3:
        dataset_json(args[0], args[1], args[2], args[3:])
    elif cmd == "report-memory" and len(args) == 4:
        report_memory(*args)
    elif cmd == "run-error" and len(args) == 1:
        run_error(*args)
    elif cmd == "rss-sample" and len(args) == 3:
        rss_sample(*args)
    elif cmd == "report-ch2pg" and len(args) == 3:
        report_ch2pg(*args)
    elif cmd == "report-window-cost" and len(args) == 3:
        report_window_cost(*args)
    elif cmd == "report-changed-delivery" and len(args) == 4:
        report_changed_delivery(*args)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
