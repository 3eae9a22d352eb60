//! Malformed manifests and bad invocations are configuration errors: the
//! real `dpone` binary exits 2 with a stable code, the manifest path and
//! (for `manifest validate`) the file position, prints one JSON refusal for
//! `run --format json`, never panics, and touches no database.
//!
//! Every SQLite connection points into an empty folder: after each command
//! that folder must still be empty (no database, no work dir, no evidence).
//! PostgreSQL and ClickHouse connections point at 127.0.0.1:9 (discard), so
//! a connection attempt could not succeed silently.

#[path = "malformed_manifests/batch.rs"]
mod batch;
mod common;

use common::{INTERVAL_END, Run, dpone};
use std::path::{Path, PathBuf};

/// Appended to the line a diagnostic must point at.
const MARK: &str = "  # <- diagnostic";

/// A password that must never appear in any output.
const SECRET: &str = "pw-that-must-never-be-printed";

// ---------------------------------------------------------------------------
// Templates and path-addressed edits
// ---------------------------------------------------------------------------

/// sqlite -> sqlite, rolling window replace with bounded chunking.
const WINDOW: &str = r#"kind: dpone.batch.v1
source:
  type: sqlite
  connection:
    connection_type: params
    params:
      path: "{DB}/source.db"
  table:
    name: events
  options:
    columns: [id, event_ts, amount]
    native_transfer:
      wire:
        mode: auto
        binary_format: rowbinary
      execution:
        transport:
          mode: stream
        chunking:
          mode: bounded_window
          parallelism: 2
          checkpointing: resumable
        verification:
          digest: sha256
sink:
  type: sqlite
  connection:
    connection_type: params
    params:
      path: "{DB}/target.db"
  table:
    name: events_copy
  strategy:
    mode: replace
    atomicity: target_atomic
    window:
      column: event_ts
      anchor: data_interval_end
      lookback: P7D
      chunk_interval: P1D
      timezone: UTC
runtime:
  storage:
    work_dir: "{DB}/work"
"#;

/// sqlite -> sqlite, full refresh.
const FULL: &str = r#"kind: dpone.batch.v1
source:
  type: sqlite
  connection:
    connection_type: params
    params:
      path: "{DB}/source.db"
  table:
    name: events
sink:
  type: sqlite
  connection:
    connection_type: params
    params:
      path: "{DB}/target.db"
  table:
    name: events_copy
  strategy:
    mode: full_refresh
runtime:
  storage:
    work_dir: "{DB}/work"
"#;

/// postgres -> clickhouse window replace; PostgreSQL by params, ClickHouse by env.
const PG_TO_CH: &str = r#"kind: dpone.batch.v1
source:
  type: postgres
  connection:
    connection_type: params
    params:
      host: 127.0.0.1
      port: 9
      user: dpone
      password: pw-that-must-never-be-printed
      database: test
  table:
    schema: public
    name: events
sink:
  type: clickhouse
  connection:
    connection_type: env
    connection_id: CH_DISCARD
  table:
    schema: default
    name: events
  strategy:
    mode: replace
    window:
      column: event_ts
      anchor: data_interval_end
      lookback: P7D
      chunk_interval: P1D
runtime:
  storage:
    work_dir: "{DB}/work"
"#;

/// clickhouse -> postgres full refresh, both by env.
const CH_TO_PG: &str = r#"kind: dpone.batch.v1
source:
  type: clickhouse
  connection:
    connection_type: env
    connection_id: CH_DISCARD
  table:
    schema: default
    name: events
sink:
  type: postgres
  connection:
    connection_type: env
    connection_id: PG_DISCARD
  table:
    schema: public
    name: events
  strategy:
    mode: full_refresh
runtime:
  storage:
    work_dir: "{DB}/work"
"#;

/// Connection URLs for the env-based templates: the discard port, with a password.
fn discard_env() -> Vec<(&'static str, String)> {
    vec![
        ("DPONE_CONN_CH_DISCARD", format!("http://dpone:{SECRET}@127.0.0.1:9/default")),
        ("DPONE_CONN_PG_DISCARD", format!("postgres://dpone:{SECRET}@127.0.0.1:9/test")),
    ]
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// A manifest text, edited by dotted path on its block-style lines.
#[derive(Clone, Debug)]
struct Doc(String);

impl Doc {
    fn of(template: &str) -> Doc {
        Doc(template.to_string())
    }

    fn lines(&self) -> Vec<String> {
        self.0.lines().map(str::to_string).collect()
    }

    fn from_lines(lines: Vec<String>) -> Doc {
        Doc(lines.join("\n") + "\n")
    }

    /// The line of `path`'s key and the end (exclusive) of its block.
    fn locate(&self, path: &str) -> (usize, usize) {
        let lines = self.lines();
        let (mut lo, mut hi) = (0, lines.len());
        let mut found = None;
        for (depth, key) in path.split('.').enumerate() {
            let prefix = format!("{}{key}:", " ".repeat(depth * 2));
            let at = (lo..hi).find(|&i| lines[i].starts_with(&prefix)).unwrap_or_else(|| panic!("template has no `{path}`"));
            let end = (at + 1..hi).find(|&j| !lines[j].trim().is_empty() && indent_of(&lines[j]) <= depth * 2).unwrap_or(hi);
            found = Some((at, end));
            (lo, hi) = (at + 1, end);
        }
        found.expect("a non-empty path")
    }

    fn key_line(path: &str, value: &str, mark: bool) -> String {
        let depth = path.split('.').count() - 1;
        let key = path.rsplit('.').next().expect("a key");
        let sep = if value.is_empty() { "" } else { " " };
        format!("{}{key}:{sep}{value}{}", " ".repeat(depth * 2), if mark { MARK } else { "" })
    }

    fn replace_block(&self, path: &str, line: Option<String>) -> Doc {
        let (at, end) = self.locate(path);
        let mut lines = self.lines();
        lines.splice(at..end, line);
        Doc::from_lines(lines)
    }

    /// `path: value` (replacing any nested block), marked as the diagnostic's line.
    fn set(&self, path: &str, value: &str) -> Doc {
        self.replace_block(path, Some(Doc::key_line(path, value, true)))
    }

    /// Like `set`, for edits whose diagnostic points at another line.
    fn set_quiet(&self, path: &str, value: &str) -> Doc {
        self.replace_block(path, Some(Doc::key_line(path, value, false)))
    }

    /// Removes `path` and its nested block.
    fn remove(&self, path: &str) -> Doc {
        self.replace_block(path, None)
    }

    /// Adds `entry` (`key: value`) as the last child of `parent` ("" = top level), marked.
    fn insert(&self, parent: &str, entry: &str) -> Doc {
        let mut lines = self.lines();
        if parent.is_empty() {
            lines.push(format!("{entry}{MARK}"));
        } else {
            let (_, end) = self.locate(parent);
            let depth = parent.split('.').count();
            lines.insert(end, format!("{}{entry}{MARK}", " ".repeat(depth * 2)));
        }
        Doc::from_lines(lines)
    }

    /// Renames the key at `path`, keeping its value, marked.
    fn rename(&self, path: &str, new_key: &str) -> Doc {
        let (at, _) = self.locate(path);
        let mut lines = self.lines();
        let old_key = path.rsplit('.').next().expect("a key");
        let depth = path.split('.').count() - 1;
        let rest = lines[at][depth * 2 + old_key.len()..].to_string();
        lines[at] = format!("{}{new_key}{rest}{MARK}", " ".repeat(depth * 2));
        Doc::from_lines(lines)
    }

    /// A raw text edit; `from` must occur exactly once.
    fn replace(&self, from: &str, to: &str) -> Doc {
        assert_eq!(self.0.matches(from).count(), 1, "`{from}` must occur exactly once in the template");
        Doc(self.0.replacen(from, to, 1))
    }

    /// 1-based line carrying the marker, if any.
    fn marked_line(&self) -> Option<u64> {
        self.0.lines().position(|l| l.contains(MARK)).map(|i| i as u64 + 1)
    }
}

// ---------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------

struct Case {
    name: &'static str,
    yaml: Doc,
    /// Expected diagnostic code (the first one reported).
    code: &'static str,
    /// Expected manifest path of that diagnostic ("" for document-level errors).
    path: &'static str,
    /// Text the diagnostic's hint must contain.
    hint: Option<&'static str>,
}

fn case(name: &'static str, yaml: Doc, code: &'static str, path: &'static str) -> Case {
    Case { name, yaml, code, path, hint: None }
}

impl Case {
    fn hint(mut self, hint: &'static str) -> Case {
        self.hint = Some(hint);
        self
    }
}

const CHUNKING: &str = "source.options.native_transfer.execution.chunking";
const WIN: &str = "sink.strategy.window";

fn manifest_cases() -> Vec<Case> {
    let w = Doc::of(WINDOW);
    let f = Doc::of(FULL);
    let pg = Doc::of(PG_TO_CH);
    let ch = Doc::of(CH_TO_PG);
    let win = |k: &str| format!("{WIN}.{k}");
    let chunking = |k: &str| format!("{CHUNKING}.{k}");
    let policy = |key: &str, value: &str| w.insert("sink.strategy", &format!("{key}: {value}"));
    vec![
        // YAML syntax and document shape.
        case("yaml_unclosed_flow_sequence", w.replace("[id, event_ts, amount]", "[id, event_ts, amount"), "manifest_parse_error", ""),
        case("yaml_unterminated_quote", w.replace("lookback: P7D", "lookback: \"P7D"), "manifest_parse_error", ""),
        case("yaml_tab_indentation", w.replace("    name: events_copy", "\tname: events_copy"), "manifest_parse_error", ""),
        case("yaml_duplicate_top_level_key", w.insert("", "kind: dpone.batch.v1"), "duplicate_key", ""),
        case("yaml_duplicate_nested_key", w.insert(WIN, "lookback: P3D"), "duplicate_key", ""),
        case("yaml_multiple_documents", w.insert("", "---\nkind: dpone.batch.v1"), "manifest_parse_error", ""),
        case(
            "yaml_anchor_and_alias",
            w.set(&win("lookback"), "&days P7D").set_quiet(&win("chunk_interval"), "*days"),
            "yaml_alias_unsupported",
            "",
        ),
        case("yaml_merge_key", w.insert(WIN, "<<: {timezone: UTC}"), "yaml_alias_unsupported", ""),
        case("top_level_list", Doc::of("- kind: dpone.batch.v1\n- source: {}\n"), "invalid_type", ""),
        case("top_level_scalar", Doc::of("dpone.batch.v1\n"), "invalid_type", ""),
        case("empty_document", Doc::of("# nothing but a comment\n"), "invalid_type", ""),
        // kind.
        case("kind_wrong_version", w.set("kind", "dpone.batch.v2"), "invalid_value", "kind"),
        case("kind_not_a_string", w.set("kind", "1"), "invalid_type", "kind"),
        // Missing required keys at every level.
        case("missing_kind", w.remove("kind"), "missing_key", "kind"),
        case("missing_source", w.remove("source"), "missing_key", "source"),
        case("missing_sink", w.remove("sink"), "missing_key", "sink"),
        case("missing_source_type", w.remove("source.type"), "missing_key", "source.type"),
        case("missing_sink_connection", w.remove("sink.connection"), "missing_key", "sink.connection_id"),
        case("missing_source_table", w.remove("source.table"), "missing_key", "source.table"),
        case("missing_sink_table_name", w.set_quiet("sink.table", "{schema: main}"), "missing_key", "sink.table.name"),
        case("missing_connection_type", w.remove("source.connection.connection_type"), "missing_key", "source.connection.connection_type"),
        case("missing_strategy", w.remove("sink.strategy"), "missing_key", "sink.strategy"),
        case("missing_strategy_mode", w.remove("sink.strategy.mode"), "missing_key", "sink.strategy.mode"),
        case("missing_window_column", w.remove(&win("column")), "missing_key", "sink.strategy.window.column"),
        case("missing_window_anchor", w.remove(&win("anchor")), "missing_key", "sink.strategy.window.anchor"),
        case("missing_window_lookback", w.remove(&win("lookback")), "missing_key", "sink.strategy.window.lookback"),
        case(
            "empty_window_chunk_interval",
            w.set(&win("chunk_interval"), "\"\""),
            "invalid_duration",
            "sink.strategy.window.chunk_interval",
        ),
        case("missing_chunking_mode", w.remove(&chunking("mode")), "missing_key", "source.options.native_transfer.execution.chunking.mode"),
        case("missing_pg_source_table", pg.remove("source.table"), "missing_key", "source.table"),
        // Unknown keys at several depths, with did-you-mean hints.
        case("unknown_top_level_key", w.insert("", "schedul: {cron: '0 3 * * *'}"), "unknown_key", "schedul")
            .hint("did you mean `schedule`?"),
        case("unknown_source_key", w.rename("source.options", "option"), "unknown_key", "source.option").hint("did you mean `options`?"),
        case("unknown_window_key", w.insert(WIN, "timezon: UTC"), "unknown_key", "sink.strategy.window.timezon")
            .hint("did you mean `timezone`?"),
        case(
            "unknown_chunking_key",
            w.insert(CHUNKING, "paralelism: 4"),
            "unknown_key",
            "source.options.native_transfer.execution.chunking.paralelism",
        )
        .hint("did you mean `parallelism`?"),
        case("unknown_key_without_suggestion", w.insert("sink.table", "zzz: 1"), "unknown_key", "sink.table.zzz")
            .hint("known keys here: schema, name"),
        case(
            "unknown_wire_key",
            w.insert("source.options.native_transfer.wire", "compression: zstd"),
            "unknown_key",
            "source.options.native_transfer.wire.compression",
        ),
        case("unknown_pg_connection_key", pg.insert("source.connection", "sslmode: require"), "unknown_key", "source.connection.sslmode"),
        case("unknown_ch_table_key", ch.insert("source.table", "engine: MergeTree"), "unknown_key", "source.table.engine"),
        // Wrong value types.
        case(
            "string_where_integer",
            w.set(&chunking("parallelism"), "\"2\""),
            "invalid_type",
            "source.options.native_transfer.execution.chunking.parallelism",
        ),
        case(
            "float_where_integer",
            w.set(&chunking("parallelism"), "1.5"),
            "invalid_type",
            "source.options.native_transfer.execution.chunking.parallelism",
        ),
        case("list_where_mapping", w.set("sink.table", "[events_copy]"), "invalid_type", "sink.table"),
        case("scalar_where_mapping", w.set(WIN, "P7D"), "invalid_type", "sink.strategy.window"),
        case("mapping_where_string", w.set(&win("column"), "{name: event_ts}"), "invalid_type", "sink.strategy.window.column"),
        case("integer_where_string", w.set("sink.table.name", "42"), "invalid_type", "sink.table.name"),
        case("string_where_list", w.set("source.options.columns", "id"), "invalid_type", "source.options.columns"),
        case("string_where_bool", f.insert("sink.strategy", "dedup: \"yes\""), "invalid_type", "sink.strategy.dedup"),
        case("integer_duration", w.set(&win("lookback"), "7"), "invalid_type", "sink.strategy.window.lookback"),
        case("empty_value", w.set(&win("lookback"), ""), "invalid_type", "sink.strategy.window.lookback"),
        case(
            "string_where_integer_pg_block_rows",
            pg.insert("source", "options: {native_transfer: {wire: {block_rows: 64k}}}"),
            "invalid_type",
            "source.options.native_transfer.wire.block_rows",
        ),
        // Invalid enum values.
        case("source_type_unknown", w.set("source.type", "oracle"), "invalid_value", "source.type"),
        case("sink_type_typo", w.set("sink.type", "sqlit"), "invalid_value", "sink.type").hint("did you mean `sqlite`?"),
        case(
            "wire_mode_unknown",
            w.set("source.options.native_transfer.wire.mode", "turbo"),
            "invalid_value",
            "source.options.native_transfer.wire.mode",
        ),
        case(
            "binary_format_unknown",
            w.set("source.options.native_transfer.wire.binary_format", "parquet"),
            "invalid_value",
            "source.options.native_transfer.wire.binary_format",
        ),
        case(
            "transport_mode_unknown",
            w.set("source.options.native_transfer.execution.transport.mode", "carrier_pigeon"),
            "invalid_value",
            "source.options.native_transfer.execution.transport.mode",
        ),
        case(
            "digest_unknown",
            w.set("source.options.native_transfer.execution.verification.digest", "md5"),
            "invalid_value",
            "source.options.native_transfer.execution.verification.digest",
        ),
        case("anchor_unknown", w.set(&win("anchor"), "now"), "invalid_value", "sink.strategy.window.anchor"),
        case("timezone_not_utc", w.set(&win("timezone"), "Europe/Berlin"), "invalid_value", "sink.strategy.window.timezone"),
        case(
            "checkpointing_unknown",
            w.set(&chunking("checkpointing"), "always"),
            "invalid_value",
            "source.options.native_transfer.execution.chunking.checkpointing",
        ),
        case(
            "connection_type_unknown",
            w.set("sink.connection.connection_type", "url"),
            "invalid_value",
            "sink.connection.connection_type",
        ),
        case(
            "clickhouse_bulk_mode_unknown",
            pg.insert("sink", "options: {clickhouse_bulk: {mode: grpc}}"),
            "invalid_value",
            "sink.options.clickhouse_bulk.mode",
        ),
        // Durations.
        case("duration_months", w.set(&win("lookback"), "P1M"), "invalid_duration", "sink.strategy.window.lookback"),
        case("duration_years", w.set(&win("lookback"), "P1Y"), "invalid_duration", "sink.strategy.window.lookback"),
        case("duration_weeks", w.set(&win("chunk_interval"), "P2W"), "invalid_duration", "sink.strategy.window.chunk_interval"),
        case("duration_zero", w.set(&win("chunk_interval"), "P0D"), "invalid_duration", "sink.strategy.window.chunk_interval"),
        case(
            "duration_sub_microsecond",
            w.set(&win("chunk_interval"), "PT0.0000001S"),
            "invalid_duration",
            "sink.strategy.window.chunk_interval",
        ),
        case("duration_without_p", w.set(&win("lookback"), "\"7D\""), "invalid_duration", "sink.strategy.window.lookback"),
        case("duration_negative", w.set(&win("lookback"), "-P1D"), "invalid_duration", "sink.strategy.window.lookback"),
        case("duration_empty_string", w.set(&win("lookback"), "\"\""), "invalid_duration", "sink.strategy.window.lookback"),
        case("duration_pg_lookback_months", pg.set(&win("lookback"), "P1M"), "invalid_duration", "sink.strategy.window.lookback"),
        case(
            "too_many_chunks",
            w.set_quiet(&win("lookback"), "P365D").set(&win("chunk_interval"), "PT1M"),
            "too_many_chunks",
            "sink.strategy.window.chunk_interval",
        ),
        // Strategy admission rules.
        case(
            "chunking_without_window",
            f.insert("source", "options: {native_transfer: {execution: {chunking: {mode: bounded_window}}}}"),
            "rolling_window_required_for_bounded_chunking",
            CHUNKING,
        ),
        case(
            "window_policy_overwrite_type",
            policy("overwrite_type", "exchange"),
            "rolling_window_unsupported_policy:overwrite_type",
            "sink.strategy.overwrite_type",
        ),
        case(
            "window_policy_unique_key",
            policy("unique_key", "[id]"),
            "rolling_window_unsupported_policy:unique_key",
            "sink.strategy.unique_key",
        ),
        case(
            "window_policy_predicate",
            policy("predicate", "\"id > 0\""),
            "rolling_window_unsupported_policy:predicate",
            "sink.strategy.predicate",
        ),
        case(
            "window_policy_partition",
            policy("partition", "p2026"),
            "rolling_window_unsupported_policy:partition",
            "sink.strategy.partition",
        ),
        case("window_policy_dedup", policy("dedup", "true"), "rolling_window_unsupported_policy:dedup", "sink.strategy.dedup"),
        case(
            "window_policy_pre_sql",
            policy("pre_sql", "\"DELETE FROM events_copy\""),
            "rolling_window_unsupported_policy:pre_sql",
            "sink.strategy.pre_sql",
        ),
        case(
            "window_policy_post_sql",
            policy("post_sql", "\"VACUUM\""),
            "rolling_window_unsupported_policy:post_sql",
            "sink.strategy.post_sql",
        ),
        case("window_policy_hooks", policy("hooks", "[notify]"), "rolling_window_unsupported_policy:hooks", "sink.strategy.hooks"),
        case(
            "window_policy_incremental_column",
            w.insert("source.options", "incremental_column: id"),
            "rolling_window_unsupported_policy:incremental_column",
            "source.options.incremental_column",
        ),
        case(
            "window_policy_pg_dedup",
            pg.insert("sink.strategy", "dedup: false"),
            "rolling_window_unsupported_policy:dedup",
            "sink.strategy.dedup",
        ),
        case(
            "strategy_incremental_append_without_cursor",
            f.set("sink.strategy.mode", "incremental_append"),
            "missing_key",
            "source.options.incremental_column",
        ),
        case(
            "strategy_incremental_append_with_lookback",
            f.set_quiet("sink.strategy.mode", "incremental_append")
                .replace("    name: events\nsink:", "    name: events\n  options: {incremental_column: id}\nsink:")
                .insert("sink.strategy", "lookback: P1D"),
            "incremental_lookback_requires_merge",
            "sink.strategy.lookback",
        ),
        case(
            "strategy_incremental_merge_without_cursor",
            f.set("sink.strategy.mode", "incremental_merge"),
            "missing_key",
            "source.options.incremental_column",
        ),
        case("strategy_partition_replace", ch.set("sink.strategy.mode", "partition_replace"), "unsupported_strategy", "sink.strategy.mode"),
        case("replace_without_window", w.remove(WIN), "unsupported_strategy", "sink.strategy"),
        case(
            "full_refresh_with_window",
            f.insert("sink.strategy", "window: {column: event_ts, anchor: data_interval_end, lookback: P7D, chunk_interval: P1D}"),
            "invalid_strategy",
            "sink.strategy.window",
        ),
        case(
            "full_refresh_with_atomicity",
            f.insert("sink.strategy", "atomicity: target_atomic"),
            "invalid_strategy",
            "sink.strategy.atomicity",
        ),
        // Connections.
        case("env_without_connection_id", ch.remove("sink.connection.connection_id"), "missing_key", "sink.connection.connection_id"),
        case("params_without_params_block", w.remove("source.connection.params"), "missing_key", "source.connection.params"),
        case("params_block_empty", w.set_quiet("source.connection.params", "{}"), "missing_key", "source.connection.params"),
        case(
            "params_and_connection_id",
            w.insert("source.connection", "connection_id: SRC"),
            "connection_conflict",
            "source.connection.connection_id",
        ),
        case(
            "env_and_params",
            ch.insert("source.connection", "params: {host: 127.0.0.1, port: 9}"),
            "connection_conflict",
            "source.connection.params",
        ),
        case(
            "connection_id_bad_characters",
            ch.set("sink.connection.connection_id", "pg/discard"),
            "invalid_value",
            "sink.connection.connection_id",
        ),
        // vars, schedule, limits, columns.
        case("undefined_var", w.set("sink.table.name", "\"${table_name}\""), "unknown_var", "sink.table.name"),
        case(
            "undefined_var_with_other_vars",
            w.insert("", "vars: {table: events_copy}").set("source.table.name", "\"${tabel}\""),
            "unknown_var",
            "source.table.name",
        ),
        case("cron_out_of_range", w.insert("", "schedule: {cron: \"61 * * * *\"}"), "invalid_cron", "schedule.cron"),
        case("cron_too_few_fields", w.insert("", "schedule: {cron: \"0 3 *\"}"), "invalid_cron", "schedule.cron"),
        case(
            "parallelism_zero",
            w.set(&chunking("parallelism"), "0"),
            "invalid_value",
            "source.options.native_transfer.execution.chunking.parallelism",
        ),
        case(
            "parallelism_too_high",
            w.set(&chunking("parallelism"), "65"),
            "invalid_value",
            "source.options.native_transfer.execution.chunking.parallelism",
        ),
        case(
            "native_chunks_max_rows_zero",
            w.insert("source.options.native_transfer.execution", "native_chunks: {max_rows: 0}"),
            "invalid_limit:max_rows",
            "source.options.native_transfer.execution.native_chunks.max_rows",
        ),
        case("empty_column_list", w.set("source.options.columns", "[]"), "invalid_value", "source.options.columns"),
        case("duplicate_columns", w.set("source.options.columns", "[id, event_ts, id]"), "duplicate_column", "source.options.columns[2]"),
        case(
            "window_column_not_in_columns",
            w.set("source.options.columns", "[id, amount]"),
            "window_column_not_selected",
            "source.options.columns",
        ),
        case("empty_table_name", w.set("sink.table.name", "\"\""), "invalid_value", "sink.table.name"),
    ]
}

// ---------------------------------------------------------------------------
// Running and checking
// ---------------------------------------------------------------------------

/// A manifest folder and an (empty) folder the manifest's databases point into.
struct Sandbox {
    _root: tempfile::TempDir,
    manifest_dir: PathBuf,
    db_dir: PathBuf,
}

impl Sandbox {
    fn new() -> Sandbox {
        let root = tempfile::tempdir().expect("temp dir");
        let manifest_dir = root.path().join("manifest");
        let db_dir = root.path().join("db");
        std::fs::create_dir(&manifest_dir).expect("manifest dir");
        std::fs::create_dir(&db_dir).expect("db dir");
        Sandbox { _root: root, manifest_dir, db_dir }
    }

    /// Writes the manifest (with `{DB}` pointing at the empty folder).
    fn write(&self, doc: &Doc) -> PathBuf {
        let path = self.manifest_dir.join("manifest.yaml");
        std::fs::write(&path, doc.0.replace("{DB}", &self.db_dir.display().to_string())).expect("write manifest");
        path
    }

    fn missing_manifest(&self) -> PathBuf {
        self.manifest_dir.join("no-such-manifest.yaml")
    }

    /// Problems if any file appeared: no database, work dir or evidence may be created.
    fn untouched(&self, manifest: &Path) -> Vec<String> {
        let mut problems = Vec::new();
        let created: Vec<String> = list(&self.db_dir);
        if !created.is_empty() {
            problems.push(format!("expected the database folder to stay empty (no I/O), but it now holds {created:?}"));
        }
        let expected: Vec<String> = manifest.exists().then(|| "manifest.yaml".to_string()).into_iter().collect();
        let beside = list(&self.manifest_dir);
        if beside != expected {
            problems.push(format!("expected only {expected:?} in the manifest folder, found {beside:?}"));
        }
        problems
    }
}

fn list(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).expect("read dir").map(|e| e.expect("dir entry").file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// Problems common to every configuration error: exit 2, code and file
/// named on stderr, no panic, no secret.
fn common_problems(run: &Run, file: &Path, code: &str, path: &str) -> Vec<String> {
    let mut p = Vec::new();
    if run.code != Some(2) {
        p.push(format!("expected exit code 2 (configuration error), got {:?}", run.code));
    }
    if !run.stderr.contains(&format!("error[{code}]")) {
        p.push(format!("expected stderr to contain `error[{code}]`"));
    }
    if !run.stderr.contains(&file.display().to_string()) {
        p.push(format!("expected stderr to name the manifest file {}", file.display()));
    }
    if !path.is_empty()
        && !run.stderr.contains(&format!("error[{code}] at {path} "))
        && !run.stderr.contains(&format!("error[{code}] at {path}:"))
    {
        p.push(format!("expected stderr to show `error[{code}] at {path}`"));
    }
    if let Some(problem) = run.panic_problem() {
        p.push(problem);
    }
    if run.stdout.contains(SECRET) || run.stderr.contains(SECRET) {
        p.push("a connection password was printed".to_string());
    }
    p
}

/// `run --format json`: one refusal document whose first error is `code` at `path`.
fn json_refusal_problems(run: &Run, code: &str, path: &str) -> Vec<String> {
    let doc = match run.single_json() {
        Ok(doc) => doc,
        Err(e) => return vec![e],
    };
    let mut p = Vec::new();
    if doc["passed"] != serde_json::json!(false) {
        p.push(format!("expected JSON `passed: false`, got {}", doc["passed"]));
    }
    if doc["status"] != "refused" {
        p.push(format!("expected JSON `status: \"refused\"`, got {}", doc["status"]));
    }
    if doc["error_code"] != code {
        p.push(format!("expected JSON `error_code: \"{code}\"`, got {}", doc["error_code"]));
    }
    if doc["errors"][0]["path"] != path {
        p.push(format!("expected the first JSON error's path to be \"{path}\", got {}", doc["errors"][0]["path"]));
    }
    p
}

/// `manifest validate`: a `file:LINE:COL: error[code]` line, on the marked line if any.
fn position_problems(run: &Run, file: &Path, code: &str, marked_line: Option<u64>) -> Vec<String> {
    let prefix = format!("{}:", file.display());
    let positions: Vec<(u64, u64)> = run
        .stderr
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            let mut parts = rest.splitn(3, ':');
            let line = parts.next()?.parse().ok()?;
            let column = parts.next()?.parse().ok()?;
            parts.next()?.trim_start().starts_with(&format!("error[{code}]")).then_some((line, column))
        })
        .collect();
    match (positions.first(), marked_line) {
        (None, _) => vec![format!("expected a `{}LINE:COL: error[{code}]` line on stderr", prefix)],
        (Some((line, _)), Some(want)) if *line != want => {
            vec![format!("expected the diagnostic at line {want} (the edited line), but it is reported at line {line}")]
        }
        _ => Vec::new(),
    }
}

fn report(failures: &mut Vec<String>, name: &str, run: &Run, problems: Vec<String>) {
    if !problems.is_empty() {
        failures.push(format!("case `{name}`: {}\n  - {}\n{}", run.args.join(" "), problems.join("\n  - "), run.describe()));
    }
}

fn env_refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

#[test]
fn templates_are_valid_manifests() {
    let env = discard_env();
    let templates = [
        ("WINDOW", WINDOW),
        ("FULL", FULL),
        ("PG_TO_CH", PG_TO_CH),
        ("CH_TO_PG", CH_TO_PG),
        ("BATCH", batch::BATCH),
        ("BATCH_PG_CH", batch::BATCH_PG_CH),
    ];
    for (name, template) in templates {
        let sandbox = Sandbox::new();
        let file = sandbox.write(&Doc::of(template));
        let run = dpone(&sandbox.manifest_dir, &["manifest", "validate", &file.display().to_string()], &env_refs(&env));
        assert_eq!(
            run.code,
            Some(0),
            "template {name} must be valid so that each case fails only because of its edit:\n{}",
            run.describe()
        );
        assert!(sandbox.untouched(&file).is_empty(), "validating template {name} must not create files: {:?}", sandbox.untouched(&file));
    }
}

#[test]
fn malformed_manifests_are_refused_before_any_io() {
    let cases = manifest_cases();
    assert!(cases.len() >= 45, "expected at least 45 malformed manifests, have {}", cases.len());
    let mut names: Vec<&str> = cases.iter().map(|c| c.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), cases.len(), "case names must be unique");

    let env = discard_env();
    let env = env_refs(&env);
    let mut failures = Vec::new();
    for case in &cases {
        let sandbox = Sandbox::new();
        let file = sandbox.write(&case.yaml);
        let file_arg = file.display().to_string();

        let validate = dpone(&sandbox.manifest_dir, &["manifest", "validate", &file_arg], &env);
        let mut problems = common_problems(&validate, &file, case.code, case.path);
        problems.extend(position_problems(&validate, &file, case.code, case.yaml.marked_line()));
        if let Some(hint) = case.hint
            && !validate.stderr.contains(&format!("hint: {hint}"))
        {
            problems.push(format!("expected the hint `{hint}`"));
        }
        problems.extend(sandbox.untouched(&file));
        report(&mut failures, case.name, &validate, problems);

        let run = dpone(&sandbox.manifest_dir, &["run", &file_arg, "--interval-end", INTERVAL_END, "--format", "json"], &env);
        let mut problems = common_problems(&run, &file, case.code, case.path);
        problems.extend(json_refusal_problems(&run, case.code, case.path));
        problems.extend(sandbox.untouched(&file));
        report(&mut failures, case.name, &run, problems);
    }
    assert!(failures.is_empty(), "{} of {} cases misbehaved:\n\n{}", failures.len(), cases.len(), failures.join("\n\n"));
}

/// `run --format json` of a batch manifest: one refusal document per
/// process refused (or one for the whole file), the others `not_run`;
/// every one `passed: false`, the first refusal naming `code` at `path`.
fn batch_json_problems(run: &Run, code: &str, path: &str) -> Vec<String> {
    let docs: Vec<serde_json::Value> = match serde_json::Deserializer::from_str(&run.stdout).into_iter().collect() {
        Ok(d) => d,
        Err(e) => return vec![format!("stdout is not JSON lines: {e}")],
    };
    let mut p = Vec::new();
    if docs.is_empty() {
        p.push("expected at least one JSON document".to_string());
    }
    if docs.iter().any(|d| d["passed"] != serde_json::json!(false) || !["refused", "not_run"].contains(&d["status"].as_str().unwrap_or("")))
    {
        p.push("expected every document to be `passed: false`, refused or not_run".to_string());
    }
    match docs.iter().find(|d| d["status"] == "refused") {
        Some(d) if d["error_code"] == code && d["errors"][0]["path"] == path => {}
        Some(d) => {
            p.push(format!("expected the first refusal to be `{code}` at `{path}`, got {} at {}", d["error_code"], d["errors"][0]["path"]))
        }
        None => p.push("expected a refused document".to_string()),
    }
    p
}

#[test]
fn malformed_batch_manifests_are_refused_before_any_io() {
    let cases = batch::cases();
    assert!(cases.len() >= 30, "expected at least 30 malformed batch manifests, have {}", cases.len());
    let mut names: Vec<&str> = cases.iter().map(|c| c.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), cases.len(), "case names must be unique");
    let env = discard_env();
    let env = env_refs(&env);
    let mut failures = Vec::new();
    for case in &cases {
        let sandbox = Sandbox::new();
        let file = sandbox.write(&case.yaml);
        let file_arg = file.display().to_string();
        let validate = dpone(&sandbox.manifest_dir, &["manifest", "validate", &file_arg], &env);
        let mut problems = common_problems(&validate, &file, case.code, case.path);
        problems.extend(position_problems(&validate, &file, case.code, case.yaml.marked_line()));
        if let Some(hint) = case.hint
            && !validate.stderr.contains(&format!("hint: {hint}"))
        {
            problems.push(format!("expected the hint `{hint}`"));
        }
        problems.extend(sandbox.untouched(&file));
        report(&mut failures, case.name, &validate, problems);

        let run =
            dpone(&sandbox.manifest_dir, &["run", &file_arg, "--interval-end", INTERVAL_END, "--format", "json", "--jobs", "2"], &env);
        let mut problems = common_problems(&run, &file, case.code, case.path);
        problems.extend(batch_json_problems(&run, case.code, case.path));
        problems.extend(sandbox.untouched(&file));
        report(&mut failures, case.name, &run, problems);
    }
    assert!(failures.is_empty(), "{} of {} cases misbehaved:\n\n{}", failures.len(), cases.len(), failures.join("\n\n"));
}

// ---------------------------------------------------------------------------
// Invocation-level configuration errors (valid manifests)
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Cmd {
    Run,
    Plan,
    Validate,
}

struct Invocation {
    name: &'static str,
    /// None: the manifest file does not exist.
    yaml: Option<Doc>,
    args: Vec<&'static str>,
    env: Vec<(&'static str, String)>,
    commands: Vec<Cmd>,
    code: &'static str,
    path: &'static str,
}

fn invocation(name: &'static str, yaml: Option<Doc>, args: &[&'static str], code: &'static str, path: &'static str) -> Invocation {
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

fn invocation_cases() -> Vec<Invocation> {
    let w = Doc::of(WINDOW);
    let by_env = w.set_quiet("source.connection", "{connection_type: env, connection_id: SRC_DB}");
    vec![
        invocation("missing_interval_end", Some(w.clone()), &[], "missing_interval_end", "--interval-end"),
        invocation("interval_end_date_only", Some(w.clone()), &["--interval-end", "2026-09-09"], "invalid_interval", "--interval-end"),
        invocation(
            "interval_end_without_offset",
            Some(w.clone()),
            &["--interval-end", "2026-09-09T00:00:00"],
            "invalid_interval",
            "--interval-end",
        ),
        invocation(
            "interval_end_nanoseconds",
            Some(w.clone()),
            &["--interval-end", "2026-09-09T00:00:00.0000001Z"],
            "invalid_interval",
            "--interval-end",
        ),
        invocation("interval_end_env_garbage", Some(w.clone()), &[], "invalid_interval", "DPONE_INTERVAL_END")
            .env("DPONE_INTERVAL_END", "yesterday"),
        invocation(
            "interval_start_mismatch",
            Some(w.clone()),
            &["--interval-end", INTERVAL_END, "--interval-start", "2026-09-01T00:00:00Z"],
            "interval_mismatch",
            "--interval-start",
        ),
        invocation(
            "interval_start_env_mismatch",
            Some(w.clone()),
            &["--interval-end", INTERVAL_END],
            "interval_mismatch",
            "DPONE_INTERVAL_START",
        )
        .env("DPONE_INTERVAL_START", "2026-09-03T00:00:00Z"),
        invocation(
            "interval_start_after_end",
            Some(w.clone()),
            &["--interval-end", INTERVAL_END, "--interval-start", "2026-09-10T00:00:00Z"],
            "invalid_interval",
            "--interval-start",
        ),
        invocation(
            "missing_connection_env",
            Some(by_env.clone()),
            &["--interval-end", INTERVAL_END],
            "missing_connection_env",
            "source.connection.connection_id",
        ),
        invocation(
            "empty_connection_env",
            Some(by_env),
            &["--interval-end", INTERVAL_END],
            "missing_connection_env",
            "source.connection.connection_id",
        )
        .env("DPONE_CONN_SRC_DB", ""),
        invocation(
            "sqlite_params_unknown_key",
            Some(w.insert("source.connection.params", "host: 127.0.0.1")),
            &["--interval-end", INTERVAL_END],
            "unknown_key",
            "source.connection.params.host",
        ),
        invocation(
            "unsupported_route_sqlite_to_mssql",
            Some(w.set_quiet("sink.type", "mssql")),
            &["--interval-end", INTERVAL_END],
            "unsupported_route",
            "sink.type",
        ),
        invocation("pg_to_ch_missing_interval_end", Some(Doc::of(PG_TO_CH)), &[], "missing_interval_end", "--interval-end"),
        invocation(
            "pg_to_ch_missing_clickhouse_env",
            Some(Doc::of(PG_TO_CH)),
            &["--interval-end", INTERVAL_END],
            "missing_connection_env",
            "sink.connection.connection_id",
        )
        .without_env("DPONE_CONN_CH_DISCARD"),
        invocation("manifest_file_missing", None, &["--interval-end", INTERVAL_END], "manifest_unreadable", "").commands(&[
            Cmd::Run,
            Cmd::Plan,
            Cmd::Validate,
        ]),
    ]
}

#[test]
fn invocation_errors_exit_2_before_any_io() {
    let cases = invocation_cases();
    let mut failures = Vec::new();
    for case in &cases {
        let sandbox = Sandbox::new();
        let file = match &case.yaml {
            Some(doc) => sandbox.write(doc),
            None => sandbox.missing_manifest(),
        };
        let file_arg = file.display().to_string();
        let env = env_refs(&case.env);
        for cmd in &case.commands {
            let mut args: Vec<&str> = match cmd {
                Cmd::Run => vec!["run", &file_arg],
                Cmd::Plan => vec!["plan", &file_arg],
                Cmd::Validate => vec!["manifest", "validate", &file_arg],
            };
            if *cmd != Cmd::Validate {
                args.extend(case.args.iter().copied());
            }
            if *cmd == Cmd::Run {
                args.extend(["--format", "json"]);
            }
            let run = dpone(&sandbox.manifest_dir, &args, &env);
            let mut problems = common_problems(&run, &file, case.code, case.path);
            if *cmd == Cmd::Run {
                problems.extend(json_refusal_problems(&run, case.code, case.path));
            }
            problems.extend(sandbox.untouched(&file));
            report(&mut failures, case.name, &run, problems);
        }
    }
    assert!(failures.is_empty(), "{} invocation(s) misbehaved:\n\n{}", failures.len(), failures.join("\n\n"));
}

// ---------------------------------------------------------------------------
// Messages and false positives
// ---------------------------------------------------------------------------

/// `&` and `*` inside a plain scalar are text, not anchors or aliases (YAML
/// only reads them as such at the start of a node).
#[test]
fn ampersands_and_asterisks_inside_plain_scalars_are_not_aliases() {
    let doc = Doc::of(WINDOW).insert("", "vars:\n  note: fish &chips\n  glob: logs *old");
    let sandbox = Sandbox::new();
    let file = sandbox.write(&doc);
    let run = dpone(&sandbox.manifest_dir, &["manifest", "validate", &file.display().to_string()], &[]);
    assert_eq!(run.code, Some(0), "expected plain scalars containing ` &x` / ` *x` to be accepted as text:\n{}", run.describe());
}

/// Parser errors are shown to manifest authors: they must not carry advice
/// meant for programmers of the YAML library.
#[test]
fn yaml_errors_do_not_leak_parser_api_advice() {
    let w = Doc::of(WINDOW);
    for (name, doc) in
        [("duplicate_key", w.insert(WIN, "lookback: P3D")), ("multiple_documents", w.insert("", "---\nkind: dpone.batch.v1"))]
    {
        let sandbox = Sandbox::new();
        let file = sandbox.write(&doc);
        let run = dpone(&sandbox.manifest_dir, &["manifest", "validate", &file.display().to_string()], &[]);
        assert_eq!(run.code, Some(2), "{name}: expected exit 2:\n{}", run.describe());
        for leak in ["DuplicateKeyPolicy", "Options", "from_str_multiple"] {
            assert!(
                !run.stderr.contains(leak),
                "{name}: expected a message for manifest authors, but it mentions the parser API `{leak}`:\n{}",
                run.describe()
            );
        }
    }
}

/// Refusals the plan knows without a connection stop `run` before any probe:
/// the JSON lists exactly the plan's refusals (no `source_missing` from
/// probing the database), and stderr names the manifest file.
#[test]
fn plan_refusals_stop_run_before_any_probe() {
    let doc = Doc::of(WINDOW).set("source.options.native_transfer.wire.mode", "typed_raw");
    let sandbox = Sandbox::new();
    let file = sandbox.write(&doc);
    let file_arg = file.display().to_string();
    let code = "unsupported_route_option:wire.mode";

    let plan = dpone(&sandbox.manifest_dir, &["plan", &file_arg, "--interval-end", INTERVAL_END, "--format", "json"], &[]);
    assert_eq!(plan.code, Some(2), "expected `plan` to exit 2 on a refused plan:\n{}", plan.describe());
    let plan_doc = plan.single_json().unwrap_or_else(|e| panic!("{e}:\n{}", plan.describe()));
    let plan_codes: Vec<&str> = plan_doc["refusals"].as_array().expect("refusals").iter().filter_map(|r| r["code"].as_str()).collect();
    assert_eq!(plan_codes, vec![code], "expected the plan to refuse the wire mode");
    assert_eq!(sandbox.untouched(&file), Vec::<String>::new(), "expected `plan` to touch nothing");

    let run = dpone(&sandbox.manifest_dir, &["run", &file_arg, "--interval-end", INTERVAL_END, "--format", "json"], &[]);
    let mut problems = common_problems(&run, &file, code, "source.options.native_transfer.wire.mode");
    problems.extend(json_refusal_problems(&run, code, "source.options.native_transfer.wire.mode"));
    if let Ok(doc) = run.single_json() {
        let codes: Vec<&str> = doc["errors"].as_array().map(|e| e.iter().filter_map(|x| x["code"].as_str()).collect()).unwrap_or_default();
        if codes != plan_codes {
            problems
                .push(format!("expected exactly the plan's refusals {plan_codes:?} (nothing from probing the databases), got {codes:?}"));
        }
    }
    problems.extend(sandbox.untouched(&file));
    assert!(problems.is_empty(), "{}\n{}", problems.join("\n"), run.describe());
}
