//! The manifest templates of the malformed-manifest tests and `Doc`, a
//! manifest text edited by dotted path (each case is a template with one
//! edit, the edited line marked where the diagnostic must point).

/// Appended to the line a diagnostic must point at.
pub const MARK: &str = "  # <- diagnostic";

/// A password that must never appear in any output.
pub const SECRET: &str = "pw-that-must-never-be-printed";

// ---------------------------------------------------------------------------
// Templates and path-addressed edits
// ---------------------------------------------------------------------------

/// sqlite -> sqlite, rolling window replace with bounded chunking.
pub const WINDOW: &str = r#"kind: dpone.batch.v1
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

/// sqlite -> sqlite, full refresh: [`WINDOW`] without its transfer options and window.
pub fn full() -> Doc {
    let window = Doc::of(WINDOW);
    window
        .remove("source.options")
        .remove("sink.strategy.atomicity")
        .remove("sink.strategy.window")
        .set_quiet("sink.strategy.mode", "full_refresh")
}

/// The ClickHouse side of [`PG_TO_CH`] (its sink) and [`CH_TO_PG`] (its
/// source): table `default.events`, connection `CH_DISCARD` by env.
macro_rules! ch_discard_events {
    () => {
        r#"  type: clickhouse
  connection:
    connection_type: env
    connection_id: CH_DISCARD
  table:
    schema: default
    name: events
"#
    };
}

/// postgres -> clickhouse window replace; PostgreSQL by params, ClickHouse by env.
pub const PG_TO_CH: &str = concat!(
    r#"kind: dpone.batch.v1
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
"#,
    ch_discard_events!(),
    r#"  strategy:
    mode: replace
    window:
      column: event_ts
      anchor: data_interval_end
      lookback: P7D
      chunk_interval: P1D
runtime:
  storage:
    work_dir: "{DB}/work"
"#
);

/// clickhouse -> postgres full refresh, both by env.
pub const CH_TO_PG: &str = concat!(
    r#"kind: dpone.batch.v1
source:
"#,
    ch_discard_events!(),
    r#"sink:
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
"#
);

/// Connection URLs for the env-based templates: the discard port, with a password.
pub fn discard_env() -> Vec<(&'static str, String)> {
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
pub struct Doc(pub String);

impl Doc {
    pub fn of(template: &str) -> Doc {
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
    pub fn set(&self, path: &str, value: &str) -> Doc {
        self.replace_block(path, Some(Doc::key_line(path, value, true)))
    }

    /// Like `set`, for edits whose diagnostic points at another line.
    pub fn set_quiet(&self, path: &str, value: &str) -> Doc {
        self.replace_block(path, Some(Doc::key_line(path, value, false)))
    }

    /// Removes `path` and its nested block.
    pub fn remove(&self, path: &str) -> Doc {
        self.replace_block(path, None)
    }

    /// Adds `entry` (`key: value`) as the last child of `parent` ("" = top level), marked.
    pub fn insert(&self, parent: &str, entry: &str) -> Doc {
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
    pub fn rename(&self, path: &str, new_key: &str) -> Doc {
        let (at, _) = self.locate(path);
        let mut lines = self.lines();
        let old_key = path.rsplit('.').next().expect("a key");
        let depth = path.split('.').count() - 1;
        let rest = lines[at][depth * 2 + old_key.len()..].to_string();
        lines[at] = format!("{}{new_key}{rest}{MARK}", " ".repeat(depth * 2));
        Doc::from_lines(lines)
    }

    /// A raw text edit; `from` must occur exactly once.
    pub fn replace(&self, from: &str, to: &str) -> Doc {
        assert_eq!(self.0.matches(from).count(), 1, "`{from}` must occur exactly once in the template");
        Doc(self.0.replacen(from, to, 1))
    }

    /// 1-based line carrying the marker, if any.
    pub fn marked_line(&self) -> Option<u64> {
        self.0.lines().position(|l| l.contains(MARK)).map(|i| i as u64 + 1)
    }
}
