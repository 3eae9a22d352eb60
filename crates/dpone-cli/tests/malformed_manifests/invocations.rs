//! Invocation-level configuration errors of valid manifests (interval
//! flags and variables, connection variables, routes, a missing file).

use super::doc::{Doc, PG_TO_CH, WINDOW, discard_env};
use crate::common::INTERVAL_END;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Cmd {
    Run,
    Plan,
    Validate,
}

pub struct Invocation {
    pub name: &'static str,
    /// None: the manifest file does not exist.
    pub yaml: Option<Doc>,
    pub args: Vec<&'static str>,
    pub env: Vec<(&'static str, String)>,
    pub commands: Vec<Cmd>,
    pub code: &'static str,
    pub path: &'static str,
}

pub fn invocation(name: &'static str, yaml: Option<Doc>, args: &[&'static str], code: &'static str, path: &'static str) -> Invocation {
    Invocation { name, yaml, args: args.to_vec(), env: discard_env(), commands: vec![Cmd::Run, Cmd::Plan], code, path }
}

impl Invocation {
    fn env(mut self, key: &'static str, value: &str) -> Invocation {
        self.env.push((key, value.to_string()));
        self
    }

    fn without_env(mut self, key: &str) -> Invocation {
        self.env.retain(|(k, _)| *k != key);
        self
    }

    fn commands(mut self, commands: &[Cmd]) -> Invocation {
        self.commands = commands.to_vec();
        self
    }
}

#[rustfmt::skip]
pub fn invocation_cases() -> Vec<Invocation> {
    let w = Doc::of(WINDOW);
    let by_env = w.set_quiet("source.connection", "{connection_type: env, connection_id: SRC_DB}");
    vec![
        invocation("missing_interval_end", Some(w.clone()), &[], "missing_interval_end", "--interval-end"),
        invocation("interval_end_date_only", Some(w.clone()), &["--interval-end", "2026-09-09"], "invalid_interval", "--interval-end"),
        invocation("interval_end_without_offset", Some(w.clone()), &["--interval-end", "2026-09-09T00:00:00"], "invalid_interval", "--interval-end"),
        invocation("interval_end_nanoseconds", Some(w.clone()), &["--interval-end", "2026-09-09T00:00:00.0000001Z"], "invalid_interval", "--interval-end"),
        invocation("interval_end_env_garbage", Some(w.clone()), &[], "invalid_interval", "DPONE_INTERVAL_END").env("DPONE_INTERVAL_END", "yesterday"),
        invocation("interval_start_mismatch", Some(w.clone()), &["--interval-end", INTERVAL_END, "--interval-start", "2026-09-01T00:00:00Z"], "interval_mismatch", "--interval-start"),
        invocation("interval_start_env_mismatch", Some(w.clone()), &["--interval-end", INTERVAL_END], "interval_mismatch", "DPONE_INTERVAL_START").env("DPONE_INTERVAL_START", "2026-09-03T00:00:00Z"),
        invocation("interval_start_after_end", Some(w.clone()), &["--interval-end", INTERVAL_END, "--interval-start", "2026-09-10T00:00:00Z"], "invalid_interval", "--interval-start"),
        invocation("missing_connection_env", Some(by_env.clone()), &["--interval-end", INTERVAL_END], "missing_connection_env", "source.connection.connection_id"),
        invocation("empty_connection_env", Some(by_env), &["--interval-end", INTERVAL_END], "missing_connection_env", "source.connection.connection_id").env("DPONE_CONN_SRC_DB", ""),
        invocation("sqlite_params_unknown_key", Some(w.insert("source.connection.params", "host: 127.0.0.1")), &["--interval-end", INTERVAL_END], "unknown_key", "source.connection.params.host"),
        invocation("unsupported_route_sqlite_to_mssql", Some(w.set_quiet("sink.type", "mssql")), &["--interval-end", INTERVAL_END], "unsupported_route", "sink.type"),
        invocation("pg_to_ch_missing_interval_end", Some(Doc::of(PG_TO_CH)), &[], "missing_interval_end", "--interval-end"),
        invocation("pg_to_ch_missing_clickhouse_env", Some(Doc::of(PG_TO_CH)), &["--interval-end", INTERVAL_END], "missing_connection_env", "sink.connection.connection_id").without_env("DPONE_CONN_CH_DISCARD"),
        invocation("manifest_file_missing", None, &["--interval-end", INTERVAL_END], "manifest_unreadable", "").commands(&[Cmd::Run, Cmd::Plan, Cmd::Validate]),
    ]
}
