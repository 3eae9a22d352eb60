//! The source's estimate of a window read, from the planner's statistics:
//! `EXPLAIN SELECT <columns> FROM <table> WHERE <col> >= start AND <col> <
//! end` plans the read without running it; its top node's `rows` times
//! `width` (the average row width in bytes, from `pg_statistic`) is the
//! estimate. As good as the table's statistics: a table never analyzed
//! (nor auto-analyzed) is estimated from its page count and default
//! selectivities.

use dpone_core::time::Timestamp;

/// The `EXPLAIN` of reading `columns` (quoted) of `table_sql`, of the rows
/// whose `window` column lies in `[start, end)` (None: every row).
pub(crate) fn explain_sql(table_sql: &str, columns: &[String], window: Option<(&str, Timestamp, Timestamp)>) -> String {
    use crate::source::{quote_ident, timestamptz_literal};
    let list = if columns.is_empty() { "*".to_string() } else { columns.iter().map(|c| quote_ident(c)).collect::<Vec<_>>().join(", ") };
    let mut sql = format!("EXPLAIN SELECT {list} FROM {table_sql}");
    if let Some((col, start, end)) = window {
        let c = quote_ident(col);
        sql.push_str(&format!(" WHERE {c} >= {} AND {c} < {}", timestamptz_literal(start), timestamptz_literal(end)));
    }
    sql
}

/// The estimated rows and row width of a plan's top node, from its first
/// line (`Seq Scan on t  (cost=0.00..1.00 rows=50000 width=40)`).
pub(crate) fn top_rows_width(line: &str) -> Option<(u64, u64)> {
    let field = |name: &str| -> Option<u64> {
        let at = line.find(&format!(" {name}="))? + name.len() + 2;
        line[at..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    };
    Some((field("rows")?, field("width")?))
}

#[cfg(test)]
mod tests {
    use super::{explain_sql, top_rows_width};
    use dpone_core::time::Timestamp;

    #[test]
    fn the_top_node_gives_rows_and_width() {
        assert_eq!(top_rows_width("Seq Scan on events  (cost=0.00..1887.00 rows=50000 width=45)"), Some((50000, 45)));
        assert_eq!(
            top_rows_width("Index Scan using e_ts on e  (cost=0.29..8.31 rows=1 width=16)\n  Index Cond: (ts >= ...)"),
            Some((1, 16))
        );
        assert_eq!(top_rows_width("Result  (cost=0.00..0.01 rows=1 width=0)"), Some((1, 0)));
        assert_eq!(top_rows_width("no estimate here"), None);
        assert_eq!(top_rows_width("X (rows=12 width=)"), None);
    }

    #[test]
    fn the_explain_reads_the_columns_of_the_window() {
        let (s, e) = (Timestamp(0), Timestamp(86_400_000_000));
        assert_eq!(
            explain_sql("\"s\".\"t\"", &["id".into(), "a\"b".into()], Some(("ts", s, e))),
            "EXPLAIN SELECT \"id\", \"a\"\"b\" FROM \"s\".\"t\" WHERE \"ts\" >= '1970-01-01 00:00:00.000000+00'::timestamptz \
             AND \"ts\" < '1970-01-02 00:00:00.000000+00'::timestamptz"
        );
        assert_eq!(explain_sql("\"t\"", &[], None), "EXPLAIN SELECT * FROM \"t\"");
    }
}
