//! Schema comparison: does the target take the source's rows exactly?

use crate::error::Diagnostic;
use crate::types::{Column, DType};

/// Whether values of canonical type `source` are written exactly as `target`.
pub fn type_compatible(source: &DType, target: &DType) -> bool {
    crate::types::exact_widening(source, target)
}

/// Refusals for a target whose columns do not take the source's rows
/// exactly: names must match one to one and types must be compatible. A
/// nullable source column into a NOT NULL target column is admitted with a
/// per-row check (see [`null_checks`]) unless `refuse_nullable` asks for
/// the refusal (`sink.options.nullable_into_not_null: refuse`).
pub fn schema_refusals(source: &[Column], target: &[Column], refuse_nullable: bool) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for t in target {
        match source.iter().find(|s| s.name == t.name) {
            None => out.push(
                Diagnostic::new("schema_mismatch", "sink.table", format!("target column `{}` has no source column", t.name))
                    .hint("add the column to the source (or to source.options.columns), or drop it from the target"),
            ),
            Some(s) => {
                if !type_compatible(&s.ty.dtype, &t.ty.dtype) {
                    out.push(
                        Diagnostic::new(
                            "schema_mismatch",
                            "sink.table",
                            format!(
                                "column `{}`: source {} maps to {}, but the target column is {}",
                                t.name, s.native_type, s.ty.dtype, t.ty.dtype
                            ),
                        )
                        .hint("make the target column type equal the mapping shown by `dpone schema type-matrix`"),
                    );
                }
                if refuse_nullable && s.ty.nullable && !t.ty.nullable {
                    out.push(
                        Diagnostic::new(
                            "schema_mismatch",
                            "sink.table",
                            format!("column `{}` may be NULL in the source but the target column is not nullable", t.name),
                        )
                        .hint("make the target column nullable or the source column NOT NULL, or drop `sink.options.nullable_into_not_null: refuse` to check the rows instead"),
                    );
                }
            }
        }
    }
    for s in source {
        if !target.iter().any(|t| t.name == s.name) {
            out.push(
                Diagnostic::new(
                    "schema_mismatch",
                    "source.options.columns",
                    format!("source column `{}` does not exist in the target", s.name),
                )
                .hint("add it to the target, or list the columns to move in source.options.columns"),
            );
        }
    }
    out
}

/// Target columns that are NOT NULL while their source column may be NULL:
/// the rows are checked as they are read, and the first NULL fails the run.
pub fn null_checks(source: &[Column], target: &[Column]) -> Vec<String> {
    target.iter().filter(|t| !t.ty.nullable && source.iter().any(|s| s.name == t.name && s.ty.nullable)).map(|t| t.name.clone()).collect()
}

/// The source columns in the target's column order (after `schema_refusals` passed).
pub fn read_columns(source: &[Column], target: &[Column]) -> Vec<Column> {
    target.iter().filter_map(|t| source.iter().find(|s| s.name == t.name).cloned()).collect()
}
