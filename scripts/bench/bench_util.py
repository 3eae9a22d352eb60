#!/usr/bin/env python3
"""Small helpers for scripts/bench/pg_to_clickhouse.sh (standard library only).

  bench_util.py pg-parts URL          host, port, user, password, dbname: one per line
  bench_util.py dpone-result OUT      one JSON line summarizing a `dpone run --format json`
                                      output file and the evidence file it points to
  bench_util.py cpu-busy SECONDS      percent of all CPUs busy over SECONDS (from /proc/stat)
  bench_util.py report META JSONL OUT writes the results JSON to OUT and prints Markdown
"""

import json
import statistics
import sys
import time
import urllib.parse

# dpone's whole run must stay within this factor of the slower raw reference.
TARGETS = {"narrow": 1.25, "wide": 1.5}
RAW_CASES = ("raw_pg_copy", "raw_ch_insert")
CASE_LABELS = {
    "raw_pg_copy": "raw: psql COPY (FORMAT binary) > /dev/null",
    "raw_ch_insert": "raw: curl RowBinary INSERT (file)",
    "ch_postgresql_fn": "ClickHouse INSERT ... SELECT FROM postgresql()",
    "dpone_empty": "dpone run, empty target",
    "dpone_rerun": "dpone run, re-run replacing the window",
}
PHASES = ("extract", "load", "verify", "prepare", "publish", "evidence", "wall")


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
    ev_path = run.get("evidence_path")
    if ev_path:
        with open(ev_path, encoding="utf-8") as f:
            ev = json.load(f)
        out["phases"] = ev.get("phases")
        chunks = ev.get("chunks") or []
        out["chunks"] = len(chunks)
        out["encoded_bytes"] = sum(c.get("encoded_bytes", 0) for c in chunks)
        out["chunk_seconds"] = [round(c.get("seconds", 0.0), 3) for c in chunks]
        out["parallelism"] = (ev.get("limits") or {}).get("parallelism")
    print(json.dumps(out, separators=(",", ":")))


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
    return out


def report(meta_path, jsonl_path, out_path):
    with open(meta_path, encoding="utf-8") as f:
        meta = json.load(f)
    samples = []
    with open(jsonl_path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                samples.append(json.loads(line))

    datasets = {}
    for ds in meta["datasets"]:
        name = ds["name"]
        by_case = {}
        for s in samples:
            if s["dataset"] == name and s.get("ok", True):
                by_case.setdefault(s["case"], []).append(s)
        cases = {c: summarize(v) for c, v in by_case.items()}
        unavailable = {s["case"]: s.get("error", "") for s in samples if s["dataset"] == name and not s.get("ok", True)}
        raw = [cases[c]["median_wall_s"] for c in RAW_CASES if c in cases]
        slower_raw = max(raw) if len(raw) == len(RAW_CASES) else None
        slower_raw_case = None
        if slower_raw is not None:
            slower_raw_case = max(RAW_CASES, key=lambda c: cases[c]["median_wall_s"])
        for c, v in cases.items():
            v["ratio_to_slower_raw"] = (v["median_wall_s"] / slower_raw) if slower_raw else None
        verdicts = {}
        target = TARGETS.get(name)
        for c in ("dpone_empty", "dpone_rerun"):
            if c in cases and slower_raw and target:
                r = cases[c]["ratio_to_slower_raw"]
                verdicts[c] = {"target_ratio": target, "ratio": r, "met": r <= target}
        datasets[name] = {
            "rows": ds["rows"],
            "slower_raw_reference": slower_raw_case,
            "slower_raw_median_s": slower_raw,
            "cases": cases,
            "unavailable": unavailable,
            "verdicts": verdicts,
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
    order = ("raw_pg_copy", "raw_ch_insert", "ch_postgresql_fn", "dpone_empty", "dpone_rerun")
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
    print("dpone phases (median seconds; extract, load and verify are summed over chunks, "
          "which run in parallel, so they overlap each other and the wall time):")
    print()
    print("| dataset | case | " + " | ".join(PHASES) + " | rest of wall | process wall | dpone CPU s |")
    print("|---|---|" + "---:|" * (len(PHASES) + 3))
    for name, d in datasets.items():
        for c in ("dpone_empty", "dpone_rerun"):
            v = d["cases"].get(c)
            if v and "median_phases_s" in v:
                ph = v["median_phases_s"]
                print(
                    f"| {name} | {c} | " + " | ".join(fmt(ph.get(p)) for p in PHASES)
                    + f" | {fmt(v['median_derived_s']['rest'])} | {fmt(v['median_wall_s'])}"
                    + f" | {fmt(v['median_client_cpu_s'])} |"
                )
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
    elif cmd == "report" and len(args) == 3:
        report(*args)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
