//! Hostile and odd input, through the real `dpone` binary, without a
//! server: each is refused with exit 2, a stable code and a hint, before
//! anything is written, in bounded time and memory (issue 13).

mod common;
mod harness;

use common::{DPONE, Run, dpone};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const END: &str = "2026-09-09T00:00:00Z";

/// A quickstart folder (seeded SQLite source and target, the example
/// manifest), without running it.
fn quickstart() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("qs");
    let run = dpone(tmp.path(), &["quickstart", "--dir", dir.to_str().unwrap(), "--format", "json"], &[]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    (tmp, dir)
}

fn manifest_in(dir: &Path) -> String {
    dir.join("manifest.yaml").display().to_string()
}

fn json(run: &Run) -> serde_json::Value {
    run.single_json().unwrap_or_else(|e| panic!("{e}\n{}", run.describe()))
}

/// Asserts exit 2, a diagnostic with `code` on stderr and a hint.
fn refused(run: &Run, code: &str) {
    assert_eq!(run.code, Some(2), "{}", run.describe());
    assert!(run.stderr.contains(&format!("error[{code}]")), "expected error[{code}]:\n{}", run.describe());
    assert!(run.stderr.contains("hint:"), "a hint:\n{}", run.describe());
    assert!(run.panic_problem().is_none(), "{}", run.describe());
}

/// Runs `dpone args` and returns (exit code, stderr, wall time, peak RSS
/// in KiB). The RSS comes from a small Python parent's
/// `RUSAGE_CHILDREN`: a child's peak RSS includes the memory of the process
/// it was spawned from until it execs, so spawned from this (large) test
/// process it would measure the test, not dpone. Python's own ~10 MiB is
/// an upper bound's floor; the unbounded read of /dev/zero reached GBs.
/// A child still running after 10 s is killed and the test fails.
fn measured(args: &[&str]) -> (i32, String, Duration, i64) {
    const PARENT: &str = "import resource, subprocess, sys\n\
        r = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=10)\n\
        sys.stderr.write(r.stderr.decode(errors='replace'))\n\
        print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n\
        sys.exit(r.returncode)\n";
    let started = Instant::now();
    let out = std::process::Command::new("python3").arg("-c").arg(PARENT).arg(DPONE).args(args).output().expect("python3 runs");
    let elapsed = started.elapsed();
    let rss: i64 = String::from_utf8_lossy(&out.stdout).trim().parse().expect("the child's peak RSS");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned(), elapsed, rss)
}

/// `/dev/zero`, `/dev/urandom` and a FIFO (with no writer: opening it would
/// block forever) are refused at once; a 100 MiB (sparse) file is read only
/// up to the limit + 1 byte. Each ends in well under a second at a few MiB.
#[test]
fn unbounded_or_blocking_manifest_paths_are_refused_fast_and_small() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("manifest.fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let big = tmp.path().join("big.yaml");
    std::fs::File::create(&big).unwrap().set_len(100 << 20).unwrap();
    let cases = [
        ("/dev/zero".to_string(), "manifest_not_a_file"),
        ("/dev/urandom".to_string(), "manifest_not_a_file"),
        (fifo.display().to_string(), "manifest_not_a_file"),
        (tmp.path().display().to_string(), "manifest_not_a_file"),
        (big.display().to_string(), "manifest_too_large"),
    ];
    for (path, code) in cases {
        for command in [&["manifest", "validate"][..], &["run"], &["plan"]] {
            let mut args = command.to_vec();
            args.push(&path);
            args.extend(["--interval-end", END].iter().filter(|_| command[0] != "manifest"));
            let (exit, stderr, elapsed, rss_kib) = measured(&args);
            assert_eq!(exit, 2, "{args:?}: {stderr}");
            assert!(stderr.contains(&format!("error[{code}]")) && stderr.contains("hint:"), "{args:?}: {stderr}");
            // A read that blocked would never end: the bound only has to tell
            // that from a refusal on a loaded 2-core machine (well under a
            // second unloaded), never to time it.
            assert!(elapsed < Duration::from_secs(5), "{args:?} took {elapsed:?}");
            assert!(rss_kib < 24 * 1024, "{args:?}: peak RSS {rss_kib} KiB");
        }
    }
}

/// `./source.db`, a symlink and a hard link to the source database are the
/// source: refused as `source_is_target` before anything is written (the
/// plan compared path strings and let them run).
#[test]
fn the_source_under_another_name_is_refused_as_the_source() {
    let (_tmp, dir) = quickstart();
    std::os::unix::fs::symlink(dir.join("source.db"), dir.join("link.db")).unwrap();
    std::fs::hard_link(dir.join("source.db"), dir.join("hard.db")).unwrap();
    let text = std::fs::read_to_string(dir.join("manifest.yaml")).unwrap();
    let before = common::schema_sql(&dir.join("source.db"));
    for (i, other) in ["./source.db", "link.db", "hard.db", "../qs/source.db"].iter().enumerate() {
        let m = dir.join(format!("m{i}.yaml"));
        std::fs::write(&m, text.replace("params: {path: target.db}", &format!("params: {{path: \"{other}\"}}"))).unwrap();
        let run = dpone(&dir, &["run", m.to_str().unwrap(), "--interval-end", END, "--format", "json"], &[]);
        refused(&run, "source_is_target");
        assert_eq!(json(&run)["error_code"], "source_is_target");
    }
    assert_eq!(common::schema_sql(&dir.join("source.db")), before, "nothing was created in the source");
}

/// `manifest validate` checks `params` blocks through the adapters'
/// builders (no I/O): typos, ports out of range, TLS settings, PostgreSQL
/// names the server would truncate.
#[test]
fn validate_checks_params_blocks_and_identifiers() {
    let tmp = tempfile::tempdir().unwrap();
    let manifest = |source_params: &str, sink_params: &str, table: &str| {
        format!(
            "kind: dpone.batch.v1\nsource:\n  type: postgres\n  connection: {{connection_type: params, params: {source_params}}}\n  table: {{schema: public, name: {table}}}\nsink:\n  type: clickhouse\n  connection: {{connection_type: params, params: {sink_params}}}\n  table: {{schema: dwh, name: t}}\n  strategy: {{mode: full_refresh}}\n"
        )
    };
    let ok_pg = "{host: db, port: 5432, sslmode: verify-full}";
    let ok_ch = "{host: ch, port: 8443, secure: true}";
    let long = "t".repeat(64);
    let cases = [
        (manifest("{host: db, pasword: x}", ok_ch, "t"), "unknown_key", "source.connection.params.pasword"),
        (manifest("{host: db, port: 70000}", ok_ch, "t"), "invalid_value", "source.connection.params.port"),
        (manifest("{host: db, sslmode: verify-everything}", ok_ch, "t"), "invalid_value", "source.connection.params.sslmode"),
        (manifest(ok_pg, "{host: ch, port: 0}", "t"), "invalid_value", "sink.connection.params.port"),
        (manifest(ok_pg, "{host: ch, secure: maybe}", "t"), "invalid_value", "sink.connection.params.secure"),
        (manifest(ok_pg, "{host: ch, usr: default}", "t"), "unknown_key", "sink.connection.params.usr"),
        (manifest(ok_pg, ok_ch, &long), "identifier_too_long", "source.table.name"),
    ];
    for (i, (text, code, path)) in cases.iter().enumerate() {
        let m = tmp.path().join(format!("m{i}.yaml"));
        std::fs::write(&m, text).unwrap();
        let run = dpone(tmp.path(), &["manifest", "validate", m.to_str().unwrap(), "--format", "json"], &[]);
        assert_eq!(run.code, Some(2), "{}", run.describe());
        let errors = json(&run)["errors"].clone();
        assert_eq!((errors[0]["code"].as_str(), errors[0]["path"].as_str()), (Some(*code), Some(*path)), "{}", run.describe());
        assert!(errors[0]["hint"].is_string());
    }
    let m = tmp.path().join("ok.yaml");
    std::fs::write(&m, manifest(ok_pg, ok_ch, "t")).unwrap();
    let run = dpone(tmp.path(), &["manifest", "validate", m.to_str().unwrap()], &[]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
}

/// Terminal control characters, NUL-like escapes and bidirectional
/// overrides in manifest values are escaped in text output (JSON escapes
/// them by itself).
#[test]
fn control_characters_in_manifest_values_are_escaped_in_text_output() {
    let (_tmp, dir) = quickstart();
    let text = std::fs::read_to_string(dir.join("manifest.yaml")).unwrap();
    let hostile = "\"ev\\e[2J\\e]0;pwned\\a\\0\\u202Ets\"";
    let m = dir.join("hostile.yaml");
    std::fs::write(
        &m,
        text.replace("column: event_ts", &format!("column: {hostile}")).replace("mode: replace\n", "mode: replac\u{1b}[31m\n"),
    )
    .unwrap();
    for args in [vec!["manifest", "validate"], vec!["plan"]] {
        let mut args = args;
        let is_plan = args[0] == "plan";
        args.push(m.to_str().unwrap());
        if is_plan {
            args.extend(["--interval-end", END]);
        }
        let run = dpone(&dir, &args, &[]);
        let all = format!("{}{}", run.stdout, run.stderr);
        for raw in ['\u{1b}', '\u{7}', '\0', '\u{202e}'] {
            assert!(!all.contains(raw), "raw {raw:?} printed:\n{all:?}");
        }
        assert!(all.contains("\\u{1b}"), "escaped:\n{all}");
    }
    let m2 = dir.join("hostile2.yaml");
    std::fs::write(&m2, text.replace("column: event_ts", &format!("column: {hostile}"))).unwrap();
    let run = dpone(&dir, &["plan", m2.to_str().unwrap(), "--interval-end", END, "--offline"], &[]);
    assert!(!run.stdout.contains('\u{1b}') && run.stdout.contains("ev\\u{1b}[2J"), "{}", run.describe());
}

/// `--interval-end` refuses a `+24:00` offset and leap seconds (each used
/// to shift the window silently), and windows starting before year 1.
#[test]
fn interval_ends_that_shift_or_precede_the_calendar_are_refused() {
    let (_tmp, dir) = quickstart();
    let m = manifest_in(&dir);
    for end in ["2026-09-09T00:00:00+24:00", "2016-12-31T23:59:60Z", "2026-09-09T00:00:00-25:00", "0001-01-07T00:00:00Z"] {
        for command in ["plan", "run"] {
            let run = dpone(&dir, &[command, &m, "--interval-end", end, "--format", "json"], &[]);
            refused(&run, "invalid_interval");
        }
        let env_run = dpone(&dir, &["run", &m], &[("DPONE_INTERVAL_END", end)]);
        refused(&env_run, "invalid_interval");
    }
    let run = dpone(&dir, &["plan", &m, "--interval-end", "0001-01-08T00:00:00Z", "--offline"], &[]);
    assert_eq!(run.code, Some(0), "a window starting at 0001-01-01 is fine: {}", run.describe());
}

/// An invalid `chunk_interval` reports its own error only.
#[test]
fn an_invalid_chunk_interval_reports_only_its_own_error() {
    let (_tmp, dir) = quickstart();
    let text = std::fs::read_to_string(dir.join("manifest.yaml")).unwrap();
    let m = dir.join("m.yaml");
    std::fs::write(&m, text.replace("chunk_interval: P1D", "chunk_interval: P1M")).unwrap();
    let run = dpone(&dir, &["manifest", "validate", m.to_str().unwrap(), "--format", "json"], &[]);
    let codes: Vec<String> = json(&run)["errors"].as_array().unwrap().iter().map(|e| e["code"].as_str().unwrap().to_string()).collect();
    assert_eq!(codes, vec!["invalid_duration"], "{}", run.describe());
}

/// A `--run-id` prefix naming several runs is refused listing them; a
/// prefix naming one run shows it.
#[test]
fn an_ambiguous_run_id_prefix_is_refused_listing_the_matches() {
    let (_tmp, dir) = quickstart();
    let m = manifest_in(&dir);
    let mut ids = Vec::new();
    for end in [END, "2026-09-10T00:00:00Z"] {
        let run = dpone(&dir, &["run", &m, "--interval-end", end, "--format", "json"], &[]);
        assert_eq!(run.code, Some(0), "{}", run.describe());
        ids.push(json(&run)["run_id"].as_str().unwrap().to_string());
    }
    let common_prefix: String = ids[0].chars().zip(ids[1].chars()).take_while(|(a, b)| a == b).map(|(a, _)| a).collect();
    let run = dpone(&dir, &["status", &m, "--run-id", &common_prefix], &[]);
    refused(&run, "ambiguous_run_id");
    assert!(ids.iter().all(|id| run.stderr.contains(id.as_str())), "both runs are listed:\n{}", run.describe());
    for id in &ids {
        let run = dpone(&dir, &["status", &m, "--run-id", &id[..common_prefix.len() + 1], "--format", "json"], &[]);
        assert_eq!(run.code, Some(0), "{}", run.describe());
        assert_eq!(json(&run)["run_id"], id.as_str());
    }
}
