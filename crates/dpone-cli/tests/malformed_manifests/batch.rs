//! Malformed batch manifests (the original's `defaults` / `schemas` form):
//! each is refused with exit 2, a stable code, the path where the user
//! wrote the value (also when it came from `defaults` or `overrides`) and
//! its line, before any I/O.

use super::{Case, Doc, MARK, case};

/// sqlite -> sqlite, two tables of schema `main`, the original's form:
/// flat connection fields (params as the original's JSON object),
/// `defaults`, schema defaults, an entry with `id` and `overrides`, vars.
pub const BATCH: &str = r#"kind: dpone.batch.v1
vars:
  target_db: target
  suffix: copy
defaults:
  name: "{{ src_schema }}_{{ src_table }}"
  source:
    type: sqlite
    connection_type: params
    connection_id: '{"path": "{DB}/source.db"}'
  sink:
    type: sqlite
    connection_type: params
    connection_id: '{"path": "{DB}/{{ target_db }}.db"}'
    table:
      name: "{{ src_table }}_{{ suffix }}"
    strategy:
      mode: replace
      window:
        column: event_ts
        anchor: data_interval_end
        lookback: P7D
  runtime:
    storage:
      work_dir: "{DB}/work"
schemas:
  main:
    vars:
      suffix: copy
    defaults:
      sink:
        strategy:
          window:
            lookback: P3D
    tables:
      - events
      - table: orders
        id: main_orders
        overrides:
          sink:
            strategy:
              window:
                column: ordered_at
"#;

/// postgres -> clickhouse in the original's form, env connections by id.
pub const BATCH_PG_CH: &str = r#"kind: dpone.batch.v1
defaults:
  source:
    type: postgres
    connection_id: pg-discard
  sink:
    type: clickhouse
    connection_id: CH_DISCARD
    table:
      schema: default
      name: "{{ src_table }}"
    strategy:
      mode: replace
      window:
        column: ts
        anchor: data_interval_end
        lookback: P2D
  runtime:
    storage:
      work_dir: "{DB}/work"
schemas:
  public:
    tables: [events, orders]
"#;

/// The template with `from` (once) replaced by `to`, `#!` marking the line
/// the diagnostic must point at.
fn edit(template: &str, from: &str, to: &str) -> Doc {
    Doc::of(template).replace(from, &to.replace("#!", MARK))
}

fn b(from: &str, to: &str) -> Doc {
    edit(BATCH, from, to)
}

pub fn cases() -> Vec<Case> {
    vec![
        // Templates and vars.
        case("unknown_var_in_defaults", b("  name: \"{{ src_schema }}_{{ src_table }}\"", "  name: \"{{ src_schemaa }}_{{ src_table }}\"#!"), "unknown_var", "defaults.name")
            .hint("did you mean `src_schema`?"),
        case("unknown_var_in_a_var", b("  target_db: target", "  target_db: \"{{ nope }}\"#!"), "unknown_var", "vars.target_db"),
        case("unknown_var_in_overrides", b("                column: ordered_at", "                column: \"{{ order_column }}\"#!"), "unknown_var", "schemas.main.tables[1].overrides.sink.strategy.window.column"),
        case("var_cycle", b("  suffix: copy\ndefaults:", "  suffix: copy\n  a: \"{{ b }}\"\n  b: \"x{{ a }}\"#!\ndefaults:"), "var_cycle", "vars.b"),
        case("reserved_var", b("  target_db: target", "  src_table: mine#!"), "reserved_var", "vars.src_table"),
        case("reserved_var_in_a_table", b("        id: main_orders", "        id: main_orders\n        vars:\n          env_code: prod#!"), "reserved_var", "schemas.main.tables[1].vars.env_code"),
        case("template_not_closed", b("  name: \"{{ src_schema }}_{{ src_table }}\"", "  name: \"{{ src_table\"#!"), "invalid_template", "defaults.name"),
        case("template_filter_unsupported", b("  name: \"{{ src_schema }}_{{ src_table }}\"", "  name: \"{{ src_table | replace('a', 'b') }}\"#!"), "unsupported_template", "defaults.name"),
        case("template_statement_unsupported", b("  name: \"{{ src_schema }}_{{ src_table }}\"", "  name: \"{% if x %}a{% endif %}\"#!"), "unsupported_template", "defaults.name"),
        case("template_list_in_text", b("  suffix: copy\ndefaults:", "  suffix: copy\n  cols: [a, b]\ndefaults:").replace("  name: \"{{ src_schema }}_{{ src_table }}\"", &format!("  name: \"x_{{{{ cols }}}}\"{MARK}")), "invalid_template", "defaults.name"),
        case("typed_var_of_the_wrong_kind", b("            lookback: P3D", "            lookback: \"{{ days }}\"#!").replace("  suffix: copy\ndefaults:", "  suffix: copy\n  days: 7\ndefaults:"), "invalid_type", "schemas.main.defaults.sink.strategy.window.lookback"),
        // Table entries and selectors.
        case("duplicate_table", b("      - events\n", "      - events\n      - events#!\n"), "duplicate_table", "schemas.main.tables[1]"),
        case("duplicate_table_id", b("        id: main_orders", "        id: main.events#!"), "duplicate_table_id", "schemas.main.tables[1].id"),
        case("bad_selector_id", b("        id: main_orders", "        id: \"main orders\"#!"), "invalid_table_id", "schemas.main.tables[1].id"),
        case("entry_without_table", b("      - events\n", "      - events\n      - id: lonely#!\n"), "missing_key", "schemas.main.tables[1].table"),
        case("tables_not_a_list", b("      - events\n      - table: orders\n        id: main_orders\n        overrides:\n          sink:\n            strategy:\n              window:\n                column: ordered_at\n", "    tables: events\n").replace("    tables:\n    tables: events", &format!("    tables: events{MARK}")), "invalid_type", "schemas.main.tables"),
        case("tables_empty", b("      - events\n      - table: orders\n        id: main_orders\n        overrides:\n          sink:\n            strategy:\n              window:\n                column: ordered_at\n", "").replace("    tables:\n", "    tables: []\n").replace("  main:\n", &format!("  main:{MARK}\n")), "invalid_value", "schemas.main.tables"),
        case("entry_unknown_key", b("        id: main_orders", "        id: main_orders\n        overide: {}#!"), "unknown_key", "schemas.main.tables[1].overide").hint("did you mean `overrides`?"),
        case("schema_block_unknown_key", b("    vars:\n      suffix: copy", "    varz:#!\n      suffix: copy"), "unknown_key", "schemas.main.varz"),
        case("defaults_without_schemas", b("schemas:\n  main:", "schemaz:\n  main:").replace("kind: dpone.batch.v1\n", &format!("kind: dpone.batch.v1{MARK}\n")), "missing_key", "schemas"),
        // Overrides and defaults of unknown keys.
        case("overrides_unknown_key", b("                column: ordered_at", "                colum: ordered_at#!"), "unknown_key", "schemas.main.tables[1].overrides.sink.strategy.window.colum").hint("did you mean `column`?"),
        case("overrides_unknown_process_key", b("        overrides:\n", "        overrides:\n          nmae: x#!\n"), "unknown_key", "schemas.main.tables[1].overrides.nmae"),
        case("defaults_unknown_key", b("    strategy:\n      mode: replace", "    stratgy:#!\n      mode: replace"), "unknown_key", "defaults.sink.stratgy"),
        case("schema_defaults_bad_duration", b("            lookback: P3D", "            lookback: P1M#!"), "invalid_duration", "schemas.main.defaults.sink.strategy.window.lookback"),
        case("overrides_bad_chunk_interval", b("                column: ordered_at", "                column: ordered_at\n                chunk_interval: PT0S#!"), "invalid_duration", "schemas.main.tables[1].overrides.sink.strategy.window.chunk_interval"),
        case("defaults_bad_limit", b("    type: sqlite\n    connection_type: params\n    connection_id: '{\"path\": \"{DB}/source.db\"}'", "    type: sqlite\n    connection_type: params\n    connection_id: '{\"path\": \"{DB}/source.db\"}'\n    options:\n      native_transfer:\n        execution:\n          native_chunks:\n            max_rows: 0#!"), "invalid_limit:max_rows", "defaults.source.options.native_transfer.execution.native_chunks.max_rows"),
        case("missing_source_everywhere", b("  source:\n    type: sqlite\n    connection_type: params\n    connection_id: '{\"path\": \"{DB}/source.db\"}'\n", "").replace("      - events\n", &format!("      - events{MARK}\n")), "missing_key", "defaults.source"),
        case("missing_sink_table", b("    table:\n      name: \"{{ src_table }}_{{ suffix }}\"\n", "").replace("    type: sqlite\n    connection_type: params\n    connection_id: '{\"path\": \"{DB}/{{ target_db }}.db\"}'", &format!("    type: sqlite{MARK}\n    connection_type: params\n    connection_id: '{{\"path\": \"{{DB}}/{{{{ target_db }}}}.db\"}}'")), "missing_key", "defaults.sink.table"),
        case("duplicate_process_name", b("  name: \"{{ src_schema }}_{{ src_table }}\"", "  name: one_name#!"), "duplicate_process_name", "defaults.name"),
        case("duplicate_target", b("    table:\n      name: \"{{ src_table }}_{{ suffix }}\"", "    table:#!\n      name: shared"), "duplicate_target", "defaults.sink.table"),
        case("misplaced_source", b("kind: dpone.batch.v1\n", "kind: dpone.batch.v1\nsource:#!\n  type: sqlite\n"), "misplaced_key", "source"),
        // Connections.
        case("connection_conflict", b("    type: sqlite\n    connection_type: params\n    connection_id: '{\"path\": \"{DB}/source.db\"}'", "    type: sqlite\n    connection_type: params#!\n    connection_id: '{\"path\": \"{DB}/source.db\"}'\n    connection:\n      connection_type: env\n      connection_id: SRC"), "connection_conflict", "defaults.source.connection_type"),
        case("params_connection_id_not_json", b("    connection_id: '{\"path\": \"{DB}/source.db\"}'", "    connection_id: source.db#!"), "invalid_connection", "defaults.source.connection_id"),
        case("params_unknown_parameter", b("    connection_id: '{\"path\": \"{DB}/source.db\"}'", "    connection_id: '{\"path\": \"{DB}/source.db\", \"host\": \"x\"}'#!"), "unknown_key", "defaults.source.connection_id.host"),
        case("connection_id_bad_characters", edit(BATCH_PG_CH, "    connection_id: pg-discard", "    connection_id: \"pg discard\"#!"), "invalid_value", "defaults.source.connection_id"),
        // Features of the original refused by name.
        case("unknown_convention", b("kind: dpone.batch.v1\n", "kind: dpone.batch.v1\nconvention: landing_raw_v9#!\n"), "unknown_convention", "convention"),
        case("registry", b("kind: dpone.batch.v1\n", "kind: dpone.batch.v1\nregistry: ../registry/sources.yaml#!\n"), "unsupported_feature", "registry"),
        case("quality_gates", b("kind: dpone.batch.v1\n", "kind: dpone.batch.v1\nquality:#!\n  gates: []\n"), "unsupported_feature", "quality"),
        case("vault_connection", edit(BATCH_PG_CH, "    connection_id: pg-discard", "    connection_type: vault#!\n    connection_id: pg-discard"), "unsupported_feature", "defaults.source.connection_type"),
        case("vault_path", edit(BATCH_PG_CH, "    connection_id: pg-discard", "    connection_id: pg-discard\n    vault_path: postgres/demo#!"), "unsupported_feature", "defaults.source.vault_path"),
        case("bigquery_sink", edit(BATCH_PG_CH, "    type: clickhouse", "    type: bigquery#!"), "unsupported_feature", "defaults.sink.type"),
        case("merge_policy_with_a_window", b("      mode: replace", "      mode: replace\n      merge_policy: lightweight_delete_insert#!"), "rolling_window_unsupported_policy:merge_policy", "defaults.sink.strategy.merge_policy"),
        case("naming_labels", b("schemas:\n  main:", "naming:\n  labels:#!\n    layer: landing\nschemas:\n  main:"), "unsupported_feature", "naming.labels"),
        case("entry_depends_on", b("        id: main_orders", "        id: main_orders\n        depends_on: [main.events]#!"), "unsupported_feature", "schemas.main.tables[1].depends_on"),
        case("export_format_option", edit(BATCH_PG_CH, "    connection_id: pg-discard", "    connection_id: pg-discard\n    options:\n      export_format: csv#!"), "unsupported_export_format", "defaults.source.options.export_format"),
    ]
}
