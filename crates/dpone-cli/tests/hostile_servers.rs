//! Issue 13 against real servers (PostgreSQL -> ClickHouse through the
//! `dpone` binary): TLS to both servers through the TLS endpoints that
//! `scripts/services.sh` starts (a wrong CA refused), DateTime64's range,
//! a nullable column into a NOT NULL one checked row by row, credentials
//! echoed by a proxy kept out of every output and the journal, and the
//! exit code of a run that cannot reach its server or is refused its
//! credentials.

mod harness;
mod pg_clickhouse_common;

use dpone_core::value::Value;
use harness::codes;
use pg_clickhouse_common::{Fixture, ManifestOptions, Row, at, col, id_ts, int, text};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

fn rows(n: i64) -> Vec<Row> {
    (0..n).map(|i| vec![int(i), at("2026-09-07T00:00:00Z", i * 1_000_000), text(&format!("n{i}"))]).collect()
}

fn basic() -> Fixture {
    Fixture::new("hostile", id_ts([col("name", "text", "Nullable(String)")]))
}

/// [`basic`] with `n` source rows.
fn seeded(n: i64) -> Fixture {
    let fx = basic();
    fx.insert_source(&rows(n));
    fx
}

/// [`seeded`] with both connections through TLS with `ca` trusted.
fn seeded_over_tls(n: i64, ca: &str) -> Fixture {
    let mut fx = seeded(n);
    fx.postgres_url = format!("{}?sslmode=verify-full&sslrootcert={ca}", dpone_testkit::postgres_tls_url());
    fx.clickhouse_url = format!("{}/?ca_file={ca}", dpone_testkit::clickhouse_tls_url());
    fx
}

/// A run of `fx` that exits `code` with JSON `status` and `field` =
/// `value`; its JSON.
fn assert_run_ends(fx: &Fixture, code: i32, status: &str, (field, value): (&str, &str)) -> serde_json::Value {
    let run = fx.run();
    let doc = run.json();
    assert_eq!((run.code, doc["status"].as_str(), doc[field].as_str()), (Some(code), Some(status), Some(value)), "{}", run.describe());
    doc
}

/// A local port nothing listens on.
fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A run of `fx` whose server refuses the credentials: exit 2 with
/// `error_code`, reported at the connection `path` with what to check.
fn assert_credentials_refused(fx: &Fixture, error_code: &str, path: &str) {
    let run = fx.run();
    let doc = run.json();
    assert_eq!((run.code, doc["error_code"].as_str()), (Some(2), Some(error_code)), "{}", run.describe());
    let error = &doc["errors"][0];
    assert_eq!(error["path"], path, "{doc:#}");
    assert!(error["hint"].as_str().unwrap_or_default().contains("user and password"), "{doc:#}");
}

#[test]
fn a_run_reaches_both_servers_over_tls_with_the_certificates_checked() {
    let mut fx = seeded_over_tls(5, &dpone_testkit::tls_ca());
    let run = fx.run();
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(fx.target_rows().len(), 5);
    // libpq's `require`: encrypted, the certificate not checked.
    fx.postgres_url = format!("{}?sslmode=require", dpone_testkit::postgres_tls_url());
    assert_eq!(fx.plan().code, Some(0));
    fx.finish();
}

/// A CA that did not sign the servers' certificate: both refused with a
/// permanent TLS error (not "check that the server is reachable"), exit 2,
/// nothing written.
#[test]
fn a_wrong_ca_is_refused_for_both_servers() {
    let mut fx = seeded_over_tls(3, &dpone_testkit::tls_wrong_ca());
    let plan = fx.plan();
    assert_eq!(plan.code, Some(2), "{}", plan.describe());
    let refusals = codes(&plan.json()["refusals"]);
    assert!(refusals.contains(&"postgres_tls_failed".to_string()), "{}", plan.describe());
    assert!(refusals.contains(&"clickhouse_tls_failed".to_string()), "{}", plan.describe());
    assert!(plan.stdout.contains("UnknownIssuer"), "the reason is named: {}", plan.describe());
    let run = fx.run();
    assert_eq!((run.code, run.json()["status"].as_str()), (Some(2), Some("refused")), "{}", run.describe());
    assert!(run.stderr.contains("hint:"), "{}", run.describe());
    assert!(fx.target_rows().is_empty(), "nothing was written");
    // sslmode=disable against a server that requires TLS: it cannot start.
    fx.postgres_url = format!("{}?sslmode=disable", dpone_testkit::postgres_tls_url());
    fx.clickhouse_url = fx.setup.clickhouse_url.clone();
    assert_eq!(fx.run().code, Some(2));
    fx.finish();
}

/// DateTime64's range follows the target server, probed once per run:
/// ClickHouse 26.9 renders 0000-01-01 ..= 9999-12-31 23:59:59.999999
/// exactly (`plan` shows it), and stores a value beyond as sent while
/// rendering it clamped. A `timestamptz` one microsecond past that range
/// (PostgreSQL keeps years up to 294276) fails the run naming the column
/// and the value, nothing published; the last microsecond inside is
/// published and reads back exactly. (A server with the narrower
/// 1900-2299 range: `dpone-clickhouse` `sink/datetime64.rs` and the
/// PostgreSQL transcoder's tests; none such can be installed here.)
#[test]
fn a_timestamp_beyond_the_servers_datetime64_range_fails_the_run_naming_the_column() {
    let fx = Fixture::new("hostile_dt64", id_ts([col("seen", "timestamptz NOT NULL", "DateTime64(6, 'UTC')")]));
    let range = "0000-01-01 00:00:00 ..= 9999-12-31 23:59:59.999999";
    let plan = fx.plan();
    assert_eq!(plan.code, Some(0), "{}", plan.describe());
    assert_eq!(
        plan.json()["datetime64_range"],
        serde_json::json!({"min_seconds": -62_167_219_200i64, "end_seconds": 253_402_300_800i64}),
        "{}",
        plan.describe()
    );
    let m = fx.manifest.display().to_string();
    let text_plan = fx.dpone(&["plan", &m, "--interval-end", pg_clickhouse_common::INTERVAL_END]);
    assert!(text_plan.stdout.contains(&format!("the target server holds {range} (probed)")), "{}", text_plan.describe());
    fx.pg_exec(&format!(
        "INSERT INTO {}.t VALUES (1, '2026-09-07T00:00:00Z', '2026-01-01T00:00:00Z'), (2, '2026-09-07T01:00:00Z', '10000-01-01T00:00:00Z')",
        fx.schema
    ));
    let doc = assert_run_ends(&fx, 1, "failed", ("publication", "absent"));
    let message = doc["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("`seen`")
            && message
                .contains(&format!("timestamp 10000-01-01 00:00:00 is outside what the target server's DateTime64(6) holds ({range})")),
        "{doc:#}"
    );
    assert!(fx.target_rows().is_empty(), "nothing was published");
    assert!(fx.owned_tables().is_empty(), "the failed run's tables are dropped: {:?}", fx.owned_tables());
    // The last microsecond the server holds is published exactly.
    fx.pg_exec(&format!("UPDATE {}.t SET seen = '9999-12-31T23:59:59.999999Z' WHERE id = 2", fx.schema));
    let run = fx.run();
    assert_eq!((run.code, run.json()["status"].as_str()), (Some(0), Some("succeeded")), "{}", run.describe());
    let mut seen: Vec<Value> = fx.target_rows().into_iter().map(|r| r[2].clone()).collect();
    seen.sort_by_key(|v| format!("{v:?}"));
    assert_eq!(seen, vec![Value::Micros(1_767_225_600_000_000), Value::Micros(253_402_300_799_999_999)]);
    fx.finish();
}

fn nullable_into_not_null() -> Fixture {
    Fixture::new("hostile_null", id_ts([col("name", "text", "String")]))
}

/// A nullable PostgreSQL column into a NOT NULL ClickHouse column is
/// admitted with a per-row check (said in `plan`): clean data is
/// published; the first NULL fails the run naming the column, nothing
/// coerced, the target unchanged.
#[test]
fn a_nullable_column_into_a_not_null_one_is_checked_row_by_row() {
    let fx = nullable_into_not_null();
    fx.insert_source(&rows(4));
    let plan = fx.plan();
    assert_eq!((plan.code, plan.json()["null_checks"].clone()), (Some(0), serde_json::json!(["name"])), "{}", plan.describe());
    let m = fx.manifest.display().to_string();
    let text_plan = fx.dpone(&["plan", &m, "--interval-end", pg_clickhouse_common::INTERVAL_END]);
    assert!(text_plan.stdout.contains("null check  `name`"), "{}", text_plan.describe());
    let run = fx.run();
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let published = fx.target_rows();
    assert_eq!(published.len(), 4);

    fx.insert_source(&[vec![int(99), at("2026-09-08T00:00:00Z", 0), Value::Null]]);
    let run = fx.run();
    let doc = run.json();
    assert_eq!((run.code, doc["publication"].as_str()), (Some(1), Some("absent")), "{}", run.describe());
    let message = doc["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("name") && message.contains("NULL"), "the column is named: {}", run.describe());
    assert!(message.contains(" of this read)"), "and the row: {}", run.describe());
    let hint = doc["errors"][0]["hint"].as_str().unwrap_or_default();
    assert!(hint.contains("NOT NULL") && !hint.contains("row limit"), "{}", run.describe());
    assert_eq!(fx.target_rows(), published, "the target is unchanged");

    // Today's refusal, kept as an option.
    let yaml = std::fs::read_to_string(&fx.manifest).unwrap();
    std::fs::write(&fx.manifest, yaml.replace("  strategy:\n", "  options: {nullable_into_not_null: refuse}\n  strategy:\n")).unwrap();
    let plan = fx.plan();
    assert_eq!((plan.code, codes(&plan.json()["refusals"])), (Some(2), vec!["schema_mismatch".to_string()]), "{}", plan.describe());
    fx.finish();
}

/// A stand-in for a proxy in front of ClickHouse that echoes the request's
/// headers in its error page: it forwards every request to the real server
/// except INSERTs, which it answers with HTTP 500 and the headers (the
/// password among them) in the body.
fn echoing_proxy(upstream: String) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let upstream = upstream.clone();
            std::thread::spawn(move || {
                let _ = proxy_one(conn, &upstream);
            });
        }
    });
    port
}

/// One request per connection (`Connection: close` both ways).
fn proxy_one(mut conn: TcpStream, upstream: &str) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if conn.read(&mut byte)? == 0 {
            return Ok(());
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let lines: Vec<&str> = head.split("\r\n").filter(|l| !l.is_empty()).collect();
    let header = |name: &str| {
        lines.iter().find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim().to_string()))
    };
    let mut body = Vec::new();
    if let Some(n) = header("content-length").and_then(|n| n.parse::<usize>().ok()) {
        body.resize(n, 0);
        conn.read_exact(&mut body)?;
    } else if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        loop {
            let mut size_line = Vec::new();
            while !size_line.ends_with(b"\r\n") {
                conn.read_exact(&mut byte)?;
                size_line.push(byte[0]);
            }
            let size = usize::from_str_radix(String::from_utf8_lossy(&size_line).trim(), 16).unwrap_or(0);
            let mut chunk = vec![0u8; size + 2];
            conn.read_exact(&mut chunk)?;
            if size == 0 {
                break;
            }
        }
    }
    if lines[0].contains("INSERT") {
        let echoed = lines[1..].join("; ");
        let page = format!("Code: 1000. DB::Exception: the proxy refused a request with headers: {echoed}\n");
        return conn.write_all(
            format!("HTTP/1.1 500 Internal Server Error\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}", page.len()).as_bytes(),
        );
    }
    let mut up = TcpStream::connect(upstream)?;
    let mut request = String::new();
    for l in &lines {
        let name = l.split(':').next().unwrap_or("").to_ascii_lowercase();
        // The proxy logs in upstream itself (the test server has no password).
        if !["connection", "transfer-encoding", "content-length", "x-clickhouse-key"].contains(&name.as_str()) {
            request.push_str(l);
            request.push_str("\r\n");
        }
    }
    request.push_str(&format!("Content-Length: {}\r\nConnection: close\r\n\r\n", body.len()));
    up.write_all(request.as_bytes())?;
    up.write_all(&body)?;
    let mut response = Vec::new();
    up.read_to_end(&mut response)?;
    conn.write_all(&response)
}

/// All bytes of the files under `dir` (the state store with its WAL, the
/// evidence), as lossy text.
fn files_text(dir: &std::path::Path) -> String {
    let mut out = String::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.push_str(&files_text(&p));
        } else if let Ok(bytes) = std::fs::read(&p) {
            out.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    out
}

/// A proxy echoing request headers puts the ClickHouse password into the
/// error text: it reaches neither stderr, nor the JSON output, nor the
/// state store; the error says `<redacted>` where it was.
#[test]
fn credentials_echoed_by_a_proxy_are_redacted_everywhere() {
    const SECRET: &str = "Tr0ub4dor-3-secret";
    let mut fx = seeded(3);
    let upstream = fx.setup.clickhouse_url.trim_start_matches("http://").trim_end_matches('/').to_string();
    let port = echoing_proxy(upstream);
    fx.clickhouse_url = format!("http://default:{SECRET}@127.0.0.1:{port}");
    let run = fx.run();
    assert_eq!(run.code, Some(1), "the staging INSERT fails: {}", run.describe());
    let all = format!("{}\n{}", run.stdout, run.stderr);
    assert!(all.to_ascii_lowercase().contains("x-clickhouse-key: <redacted>"), "the echo came back, redacted: {}", run.describe());
    assert!(!all.contains(SECRET), "the password leaked into the output: {}", run.describe());
    let stored = files_text(&fx.work_dir());
    assert!(stored.contains("<redacted>"), "the journal holds the redacted error");
    assert!(!stored.contains(SECRET), "the password leaked into the work dir (state.db)");
    let status = fx.dpone(&["status", &fx.manifest.display().to_string()]);
    assert!(!status.stdout.contains(SECRET) && !status.stderr.contains(SECRET), "{}", status.describe());
    fx.finish();
}

/// A server that cannot be reached, and one that refuses the credentials:
/// nothing was written, exit 2 (a refused connection was exit 1, a refused
/// login exit 2: one rule now).
#[test]
fn an_unreachable_server_and_refused_credentials_exit_2() {
    let mut fx = basic();
    fx.write_manifest(&ManifestOptions::default());
    let closed = closed_port();
    fx.clickhouse_url = format!("http://127.0.0.1:{closed}");
    assert_run_ends(&fx, 2, "unavailable", ("error_code", "clickhouse_unreachable"));
    assert_eq!(fx.plan().code, Some(2), "plan too");

    // A server that refuses every login (ClickHouse's code 516).
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 65536];
            let _ = conn.read(&mut buf);
            let page = "Code: 516. DB::Exception: default: Authentication failed: password is incorrect. (AUTHENTICATION_FAILED)\n";
            let _ = conn.write_all(
                format!("HTTP/1.1 401 Unauthorized\r\nX-ClickHouse-Exception-Code: 516\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}", page.len())
                    .as_bytes(),
            );
        }
    });
    fx.clickhouse_url = format!("http://default:wrong@127.0.0.1:{port}");
    // Reported at the connection (not at a table), with what to check.
    assert_credentials_refused(&fx, "clickhouse_auth_failed", "sink.connection");
    fx.finish();
}

/// PostgreSQL that cannot be reached is named by host and port; a role it
/// refuses is reported at the source's connection with a hint (issue 31).
#[test]
fn postgres_connection_failures_name_the_server_and_the_connection() {
    let mut fx = basic();
    fx.write_manifest(&ManifestOptions::default());
    let postgres = fx.postgres_url.clone();
    let closed = closed_port();
    fx.postgres_url = format!("postgresql://postgres@127.0.0.1:{closed}/test");
    let run = fx.run();
    assert_eq!(run.code, Some(2), "{}", run.describe());
    let message = harness::messages(&run.json()["errors"]);
    assert!(message.contains(&format!("127.0.0.1:{closed}")), "the server is named: {}", run.describe());
    let plan = fx.plan();
    assert!(plan.stderr.contains(&format!("127.0.0.1:{closed}")), "plan too: {}", plan.describe());

    // A role the server does not know (SQLSTATE 28000): the credentials.
    fx.postgres_url = postgres.replacen("postgresql://postgres@", "postgresql://no_such_role_31@", 1);
    assert_credentials_refused(&fx, "postgres_auth_failed", "source.connection");
    fx.postgres_url = postgres;
    fx.finish();
}
