//! The malformed single-process manifests: one row a case (template and
//! edit, expected code, expected path, optional hint).

use super::doc::{CH_TO_PG, Doc, PG_TO_CH, WINDOW, full};

pub struct Case {
    pub name: &'static str,
    pub yaml: Doc,
    /// Expected diagnostic code (the first one reported).
    pub code: &'static str,
    /// Expected manifest path of that diagnostic ("" for document-level errors).
    pub path: &'static str,
    /// Text the diagnostic's hint must contain.
    pub hint: Option<&'static str>,
}

pub fn case(name: &'static str, yaml: Doc, code: &'static str, path: &'static str) -> Case {
    Case { name, yaml, code, path, hint: None }
}

impl Case {
    pub fn hint(mut self, hint: &'static str) -> Case {
        self.hint = Some(hint);
        self
    }
}

pub const CHUNKING: &str = "source.options.native_transfer.execution.chunking";
pub const WIN: &str = "sink.strategy.window";

#[rustfmt::skip]
pub fn manifest_cases() -> Vec<Case> {
    let w = Doc::of(WINDOW);
    let f = full();
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
        case("yaml_anchor_and_alias", w.set(&win("lookback"), "&days P7D").set_quiet(&win("chunk_interval"), "*days"), "yaml_alias_unsupported", ""),
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
        case("empty_window_chunk_interval", w.set(&win("chunk_interval"), "\"\""), "invalid_duration", "sink.strategy.window.chunk_interval"),
        case("missing_chunking_mode", w.remove(&chunking("mode")), "missing_key", "source.options.native_transfer.execution.chunking.mode"),
        case("missing_pg_source_table", pg.remove("source.table"), "missing_key", "source.table"),
        // Unknown keys at several depths, with did-you-mean hints.
        case("unknown_top_level_key", w.insert("", "schedul: {cron: '0 3 * * *'}"), "unknown_key", "schedul").hint("did you mean `schedule`?"),
        case("unknown_source_key", w.rename("source.options", "option"), "unknown_key", "source.option").hint("did you mean `options`?"),
        case("unknown_window_key", w.insert(WIN, "timezon: UTC"), "unknown_key", "sink.strategy.window.timezon").hint("did you mean `timezone`?"),
        case("unknown_chunking_key", w.insert(CHUNKING, "paralelism: 4"), "unknown_key", "source.options.native_transfer.execution.chunking.paralelism").hint("did you mean `parallelism`?"),
        case("unknown_key_without_suggestion", w.insert("sink.table", "zzz: 1"), "unknown_key", "sink.table.zzz").hint("known keys here: schema, name"),
        case("unknown_wire_key", w.insert("source.options.native_transfer.wire", "compression: zstd"), "unknown_key", "source.options.native_transfer.wire.compression"),
        case("unknown_pg_connection_key", pg.insert("source.connection", "sslmode: require"), "unknown_key", "source.connection.sslmode"),
        case("unknown_ch_table_key", ch.insert("source.table", "engine: MergeTree"), "unknown_key", "source.table.engine"),
        // Wrong value types.
        case("string_where_integer", w.set(&chunking("parallelism"), "\"2\""), "invalid_type", "source.options.native_transfer.execution.chunking.parallelism"),
        case("float_where_integer", w.set(&chunking("parallelism"), "1.5"), "invalid_type", "source.options.native_transfer.execution.chunking.parallelism"),
        case("list_where_mapping", w.set("sink.table", "[events_copy]"), "invalid_type", "sink.table"),
        case("scalar_where_mapping", w.set(WIN, "P7D"), "invalid_type", "sink.strategy.window"),
        case("mapping_where_string", w.set(&win("column"), "{name: event_ts}"), "invalid_type", "sink.strategy.window.column"),
        case("integer_where_string", w.set("sink.table.name", "42"), "invalid_type", "sink.table.name"),
        case("string_where_list", w.set("source.options.columns", "id"), "invalid_type", "source.options.columns"),
        case("string_where_bool", f.insert("sink.strategy", "dedup: \"yes\""), "invalid_type", "sink.strategy.dedup"),
        case("integer_duration", w.set(&win("lookback"), "7"), "invalid_type", "sink.strategy.window.lookback"),
        case("empty_value", w.set(&win("lookback"), ""), "invalid_type", "sink.strategy.window.lookback"),
        case("string_where_integer_pg_block_rows", pg.insert("source", "options: {native_transfer: {wire: {block_rows: 64k}}}"), "invalid_type", "source.options.native_transfer.wire.block_rows"),
        // Invalid enum values.
        case("source_type_unknown", w.set("source.type", "oracle"), "invalid_value", "source.type"),
        case("sink_type_typo", w.set("sink.type", "sqlit"), "invalid_value", "sink.type").hint("did you mean `sqlite`?"),
        case("wire_mode_unknown", w.set("source.options.native_transfer.wire.mode", "turbo"), "invalid_value", "source.options.native_transfer.wire.mode"),
        case("binary_format_unknown", w.set("source.options.native_transfer.wire.binary_format", "parquet"), "invalid_value", "source.options.native_transfer.wire.binary_format"),
        case("transport_mode_unknown", w.set("source.options.native_transfer.execution.transport.mode", "carrier_pigeon"), "invalid_value", "source.options.native_transfer.execution.transport.mode"),
        case("digest_unknown", w.set("source.options.native_transfer.execution.verification.digest", "md5"), "invalid_value", "source.options.native_transfer.execution.verification.digest"),
        case("anchor_unknown", w.set(&win("anchor"), "now"), "invalid_value", "sink.strategy.window.anchor"),
        case("timezone_not_utc", w.set(&win("timezone"), "Europe/Berlin"), "invalid_value", "sink.strategy.window.timezone"),
        case("checkpointing_unknown", w.set(&chunking("checkpointing"), "always"), "invalid_value", "source.options.native_transfer.execution.chunking.checkpointing"),
        case("connection_type_unknown", w.set("sink.connection.connection_type", "url"), "invalid_value", "sink.connection.connection_type"),
        case("clickhouse_bulk_mode_unknown", pg.insert("sink", "options: {clickhouse_bulk: {mode: grpc}}"), "invalid_value", "sink.options.clickhouse_bulk.mode"),
        // Durations.
        case("duration_months", w.set(&win("lookback"), "P1M"), "invalid_duration", "sink.strategy.window.lookback"),
        case("duration_years", w.set(&win("lookback"), "P1Y"), "invalid_duration", "sink.strategy.window.lookback"),
        case("duration_weeks", w.set(&win("chunk_interval"), "P2W"), "invalid_duration", "sink.strategy.window.chunk_interval"),
        case("duration_zero", w.set(&win("chunk_interval"), "P0D"), "invalid_duration", "sink.strategy.window.chunk_interval"),
        case("duration_sub_microsecond", w.set(&win("chunk_interval"), "PT0.0000001S"), "invalid_duration", "sink.strategy.window.chunk_interval"),
        case("duration_without_p", w.set(&win("lookback"), "\"7D\""), "invalid_duration", "sink.strategy.window.lookback"),
        case("duration_negative", w.set(&win("lookback"), "-P1D"), "invalid_duration", "sink.strategy.window.lookback"),
        case("duration_empty_string", w.set(&win("lookback"), "\"\""), "invalid_duration", "sink.strategy.window.lookback"),
        case("duration_pg_lookback_months", pg.set(&win("lookback"), "P1M"), "invalid_duration", "sink.strategy.window.lookback"),
        case("too_many_chunks", w.set_quiet(&win("lookback"), "P365D").set(&win("chunk_interval"), "PT1M"), "too_many_chunks", "sink.strategy.window.chunk_interval"),
        // Strategy admission rules.
        case("chunking_without_window", f.insert("source", "options: {native_transfer: {execution: {chunking: {mode: bounded_window}}}}"), "rolling_window_required_for_bounded_chunking", CHUNKING),
        case("window_policy_overwrite_type", policy("overwrite_type", "exchange"), "rolling_window_unsupported_policy:overwrite_type", "sink.strategy.overwrite_type"),
        case("window_policy_unique_key", policy("unique_key", "[id]"), "rolling_window_unsupported_policy:unique_key", "sink.strategy.unique_key"),
        case("window_policy_predicate", policy("predicate", "\"id > 0\""), "rolling_window_unsupported_policy:predicate", "sink.strategy.predicate"),
        case("window_policy_partition", policy("partition", "p2026"), "rolling_window_unsupported_policy:partition", "sink.strategy.partition"),
        case("window_policy_dedup", policy("dedup", "true"), "rolling_window_unsupported_policy:dedup", "sink.strategy.dedup"),
        case("window_policy_pre_sql", policy("pre_sql", "\"DELETE FROM events_copy\""), "rolling_window_unsupported_policy:pre_sql", "sink.strategy.pre_sql"),
        case("window_policy_post_sql", policy("post_sql", "\"VACUUM\""), "rolling_window_unsupported_policy:post_sql", "sink.strategy.post_sql"),
        case("window_policy_hooks", policy("hooks", "[notify]"), "rolling_window_unsupported_policy:hooks", "sink.strategy.hooks"),
        case("window_policy_incremental_column", w.insert("source.options", "incremental_column: id"), "rolling_window_unsupported_policy:incremental_column", "source.options.incremental_column"),
        case("window_policy_pg_dedup", pg.insert("sink.strategy", "dedup: false"), "rolling_window_unsupported_policy:dedup", "sink.strategy.dedup"),
        case("strategy_incremental_append_without_cursor", f.set("sink.strategy.mode", "incremental_append"), "missing_key", "source.options.incremental_column"),
        case("strategy_incremental_append_with_lookback", f.set_quiet("sink.strategy.mode", "incremental_append").replace("    name: events\nsink:", "    name: events\n  options: {incremental_column: id}\nsink:").insert("sink.strategy", "lookback: P1D"), "incremental_lookback_requires_merge", "sink.strategy.lookback"),
        case("strategy_incremental_merge_without_cursor", f.set("sink.strategy.mode", "incremental_merge"), "missing_key", "source.options.incremental_column"),
        case("strategy_partition_replace", ch.set("sink.strategy.mode", "partition_replace"), "unsupported_strategy", "sink.strategy.mode"),
        case("replace_without_window", w.remove(WIN), "unsupported_strategy", "sink.strategy"),
        case("full_refresh_with_window", f.insert("sink.strategy", "window: {column: event_ts, anchor: data_interval_end, lookback: P7D, chunk_interval: P1D}"), "invalid_strategy", "sink.strategy.window"),
        case("full_refresh_with_atomicity", f.insert("sink.strategy", "atomicity: target_atomic"), "invalid_strategy", "sink.strategy.atomicity"),
        // Connections.
        case("env_without_connection_id", ch.remove("sink.connection.connection_id"), "missing_key", "sink.connection.connection_id"),
        case("params_without_params_block", w.remove("source.connection.params"), "missing_key", "source.connection.params"),
        case("params_block_empty", w.set_quiet("source.connection.params", "{}"), "missing_key", "source.connection.params"),
        case("params_and_connection_id", w.insert("source.connection", "connection_id: SRC"), "connection_conflict", "source.connection.connection_id"),
        case("env_and_params", ch.insert("source.connection", "params: {host: 127.0.0.1, port: 9}"), "connection_conflict", "source.connection.params"),
        case("connection_id_bad_characters", ch.set("sink.connection.connection_id", "pg/discard"), "invalid_value", "sink.connection.connection_id"),
        // vars, schedule, limits, columns.
        case("undefined_var", w.set("sink.table.name", "\"${table_name}\""), "unknown_var", "sink.table.name"),
        case("undefined_var_with_other_vars", w.insert("", "vars: {table: events_copy}").set("source.table.name", "\"${tabel}\""), "unknown_var", "source.table.name"),
        case("cron_out_of_range", w.insert("", "schedule: {cron: \"61 * * * *\"}"), "invalid_cron", "schedule.cron"),
        case("cron_too_few_fields", w.insert("", "schedule: {cron: \"0 3 *\"}"), "invalid_cron", "schedule.cron"),
        case("parallelism_zero", w.set(&chunking("parallelism"), "0"), "invalid_value", "source.options.native_transfer.execution.chunking.parallelism"),
        case("parallelism_too_high", w.set(&chunking("parallelism"), "65"), "invalid_value", "source.options.native_transfer.execution.chunking.parallelism"),
        case("native_chunks_max_rows_zero", w.insert("source.options.native_transfer.execution", "native_chunks: {max_rows: 0}"), "invalid_limit:max_rows", "source.options.native_transfer.execution.native_chunks.max_rows"),
        case("empty_column_list", w.set("source.options.columns", "[]"), "invalid_value", "source.options.columns"),
        case("duplicate_columns", w.set("source.options.columns", "[id, event_ts, id]"), "duplicate_column", "source.options.columns[2]"),
        case("window_column_not_in_columns", w.set("source.options.columns", "[id, amount]"), "window_column_not_selected", "source.options.columns"),
        case("empty_table_name", w.set("sink.table.name", "\"\""), "invalid_value", "sink.table.name"),
    ]
}
