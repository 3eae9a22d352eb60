//! Which processes of a manifest a command acts on: `--selector` (one
//! process, by selector or name), `--select` / `--exclude` glob patterns
//! (`*` any text, `?` one character) over each process's selector, name and
//! `<schema>.<table>`, and `--max-selected` (the original's default 10),
//! which refuses a selection larger than intended. Pure: problems are
//! diagnostics at the flag (exit 2 before any I/O).

use super::{Loaded, Process};
use crate::error::{Diagnostic, Diagnostics, did_you_mean};

/// The original's default of `--max-selected`.
pub const DEFAULT_MAX_SELECTED: usize = 10;

#[derive(Debug, Clone)]
pub struct Selection {
    pub selector: Option<String>,
    pub select: Vec<String>,
    pub exclude: Vec<String>,
    pub max_selected: usize,
}

impl Default for Selection {
    fn default() -> Self {
        Selection { selector: None, select: Vec::new(), exclude: Vec::new(), max_selected: DEFAULT_MAX_SELECTED }
    }
}

/// `*` matches any text, `?` one character, anything else itself.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // Classic two-pointer wildcard match with backtracking to the last `*`.
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// The names a pattern is matched against.
fn names(p: &Process) -> Vec<String> {
    let mut out = vec![p.label().to_string(), p.name.clone()];
    if let (Some(s), Some(t)) = (&p.source_schema, &p.source_table) {
        out.push(format!("{s}.{t}"));
    }
    out
}

fn listing(loaded: &Loaded) -> String {
    let all: Vec<&str> = loaded.processes.iter().map(Process::label).collect();
    let shown = all.iter().take(10).copied().collect::<Vec<_>>().join(", ");
    if all.len() > 10 { format!("{shown}, ... ({} in all; see `dpone manifest list`)", all.len()) } else { shown }
}

/// The selected processes, in file order.
pub fn select<'a>(loaded: &'a Loaded, s: &Selection) -> Result<Vec<&'a Process>, Diagnostics> {
    if s.selector.is_some() && !(s.select.is_empty() && s.exclude.is_empty()) {
        return Err(Diagnostic::new(
            "conflicting_selection",
            "--selector",
            "--selector names one process; --select / --exclude choose by pattern",
        )
        .hint("use either --selector, or --select / --exclude")
        .into());
    }
    if s.max_selected == 0 {
        return Err(Diagnostic::new("invalid_selection", "--max-selected", "--max-selected must be at least 1")
            .hint("e.g. --max-selected 20")
            .into());
    }
    if let Some(sel) = &s.selector {
        let found = loaded.processes.iter().find(|p| p.label() == sel).or_else(|| loaded.processes.iter().find(|p| names(p).contains(sel)));
        return match found {
            Some(p) => Ok(vec![p]),
            None => {
                let candidates: Vec<String> = loaded.processes.iter().flat_map(names).collect();
                let hint = match did_you_mean(sel, candidates.iter().map(String::as_str)) {
                    Some(close) => format!("did you mean `{close}`? Processes: {}", listing(loaded)),
                    None => format!("processes: {}", listing(loaded)),
                };
                Err(Diagnostic::new("unknown_selector", "--selector", format!("no process is selected by `{sel}`")).hint(hint).into())
            }
        };
    }
    for (flag, patterns) in [("--select", &s.select), ("--exclude", &s.exclude)] {
        if let Some(bad) = patterns.iter().find(|p| p.trim().is_empty()) {
            return Err(Diagnostic::new("invalid_selection", flag, format!("`{bad}` is an empty pattern"))
                .hint("write a pattern such as `public.*` or `*orders*`")
                .into());
        }
    }
    let matches = |patterns: &[String], p: &Process| patterns.iter().any(|pat| names(p).iter().any(|n| glob(pat, n)));
    let chosen: Vec<&Process> =
        loaded.processes.iter().filter(|p| s.select.is_empty() || matches(&s.select, p)).filter(|p| !matches(&s.exclude, p)).collect();
    if chosen.is_empty() {
        let flag = if s.select.is_empty() { "--exclude" } else { "--select" };
        return Err(Diagnostic::new("selection_empty", flag, "the selection matches no process")
            .hint(format!("patterns match selectors, names and <schema>.<table>; processes: {}", listing(loaded)))
            .into());
    }
    if chosen.len() > s.max_selected {
        return Err(Diagnostic::new(
            "too_many_selected",
            "--max-selected",
            format!("{} processes are selected; at most {} may be (--max-selected)", chosen.len(), s.max_selected),
        )
        .hint(format!("narrow the selection with --select / --exclude, or pass --max-selected {}", chosen.len()))
        .into());
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_like_a_shell() {
        assert!(glob("public.*", "public.orders"));
        assert!(glob("*orders*", "sales.orders_eu"));
        assert!(glob("p?blic.o*s", "public.orders"));
        assert!(!glob("public.*", "sales.orders"));
        assert!(glob("*", ""));
        assert!(!glob("a*b", "a"));
        assert!(glob("a*b*c", "a--b--b--c"));
    }
}
