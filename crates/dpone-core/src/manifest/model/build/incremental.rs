//! The incremental strategies' part of the manifest model.

use super::*;

/// `mode: incremental_append` / `incremental_merge`: the cursor column
/// (selected, when columns are listed), an optional `initial_value` (typed
/// once the column's type is known, at probe time), for a merge its
/// `unique_key` (selected too) and optional `lookback`, and nothing of the
/// other strategies.
pub(super) fn incremental(
    r: &mut Reader,
    mode: &str,
    strat_n: Option<&Node>,
    src_opts: Option<&Node>,
    columns: Option<&[String]>,
    sink: System,
) -> Option<Strategy> {
    let merge = mode == "incremental_merge";
    if let Some(w) = child(strat_n, "window") {
        r.error(
            "invalid_strategy",
            "sink.strategy.window",
            Some(w),
            format!("a window belongs to `mode: replace`, not `{mode}`"),
            "remove `window`; the cursor column selects the rows",
        );
    }
    if !merge && let Some(n) = child(strat_n, "lookback") {
        r.error(
            "incremental_lookback_requires_merge",
            "sink.strategy.lookback",
            Some(n),
            "`lookback` re-reads rows below the mark, which an append would insert twice; it is only valid with `incremental_merge`",
            "remove `lookback`; rows that arrive later at or below the mark are not appended (see docs/manifest.md, Strategies)",
        );
    }
    let refused: &[&str] = if merge {
        &["atomicity", "overwrite_type", "predicate", "partition"]
    } else {
        &["atomicity", "overwrite_type", "unique_key", "merge_policy", "duplicate_policy", "predicate", "partition"]
    };
    refuse_strategy_keys(r, strat_n, mode, refused);
    let Some(column_n) = child(src_opts, "incremental_column") else {
        r.error(
            "missing_key",
            "source.options.incremental_column",
            child(strat_n, "mode").or(strat_n),
            format!("`mode: {mode}` needs the cursor column `source.options.incremental_column`"),
            "name an integer, timestamp or date column whose values grow with new rows, e.g. `incremental_column: id`",
        );
        return None;
    };
    let column = column_n.as_str().unwrap_or_default().to_string();
    if column.is_empty() {
        r.error("invalid_value", "source.options.incremental_column", Some(column_n), "the cursor column is empty", "name a column");
    }
    if let Some(cols) = columns
        && !cols.contains(&column)
    {
        r.error(
            "incremental_column_not_selected",
            "source.options.columns",
            child(src_opts, "columns"),
            format!("the cursor column `{column}` is not in the column list"),
            "add it to source.options.columns",
        );
    }
    let initial_value = child(src_opts, "initial_value").and_then(|n| scalar_text(&n.value));
    if !merge {
        return Some(Strategy::IncrementalAppend { column, initial_value });
    }
    let key_n = child(strat_n, "unique_key");
    let unique_key: Vec<String> = match key_n.map(|n| &n.value) {
        Some(Value::Seq(items)) => items.iter().filter_map(|n| n.as_str().map(str::to_string)).collect(),
        _ => Vec::new(),
    };
    if unique_key.is_empty() || unique_key.iter().any(String::is_empty) {
        r.error(
            "merge_key_missing",
            "sink.strategy.unique_key",
            key_n.or(child(strat_n, "mode")).or(strat_n),
            "`mode: incremental_merge` needs `sink.strategy.unique_key`: the column(s) whose values identify a row",
            "name the key column(s), e.g. `unique_key: id` or `unique_key: [tenant_id, id]`",
        );
    }
    for (i, name) in unique_key.iter().enumerate() {
        if unique_key[..i].contains(name) {
            r.error(
                "duplicate_column",
                &format!("sink.strategy.unique_key[{i}]"),
                key_n,
                format!("key column `{name}` is listed twice"),
                "list each key column once",
            );
        }
        if let Some(cols) = columns
            && !cols.contains(name)
        {
            r.error(
                "merge_key_not_selected",
                "source.options.columns",
                child(src_opts, "columns"),
                format!("the key column `{name}` is not in the column list"),
                "add it to source.options.columns",
            );
        }
    }
    let lookback_n = child(strat_n, "lookback");
    let lookback = lookback_n.and_then(|n| scalar_text(&n.value)).and_then(|text| match crate::publication::LookbackSpec::parse(&text) {
        Ok(l) => Some(l),
        Err(reason) => {
            r.error("invalid_lookback", "sink.strategy.lookback", lookback_n, reason, crate::publication::LOOKBACK_HINT);
            None
        }
    });
    merge_policy(r, child(strat_n, "merge_policy"), sink);
    let fail_on_duplicates = str_at(strat_n, "duplicate_policy") == Some("fail");
    Some(Strategy::IncrementalMerge { column, initial_value, unique_key, lookback, fail_on_duplicates })
}

/// The original's `merge_policy` names whose publication is the one dpone
/// performs on `sink` (the target adapter's `merge_policies`): the
/// target's rows of the batch's keys deleted and the batch's rows
/// inserted, visible at once. The others (`update_insert`,
/// `mutation_delete_insert`, `event_upsert`, a policy of another sink) are
/// refused naming the ones this sink admits. Without an installed registry
/// (a library's tests), the transactional ones.
pub fn merge_policies(sink: System) -> &'static [&'static str] {
    let target = crate::adapter::installed().and_then(|r| r.target(sink));
    target.map_or(crate::adapter::TRANSACTIONAL_MERGE_POLICIES, |t| t.merge_policies)
}

fn merge_policy(r: &mut Reader, node: Option<&Node>, sink: System) {
    let Some(value) = node.and_then(Node::as_str) else { return };
    let supported = merge_policies(sink);
    if !supported.contains(&value) {
        r.error(
            "unsupported_merge_policy",
            "sink.strategy.merge_policy",
            node,
            format!("merge_policy `{value}` is not what dpone does on a {sink} sink"),
            format!(
                "supported on {sink}: {} (the batch's rows replace the target's rows of their keys, published atomically); or remove the key",
                supported.join(", ")
            ),
        );
    }
}
