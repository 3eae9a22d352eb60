//! JUnit XML results, as cargo-nextest, libtest (`--format junit`) and most
//! CI tools write them.
//!
//! Every `<testsuite>` element becomes a [`Suite`] holding the test cases
//! directly inside it. A case is failed when it holds `<failure>` (or
//! nextest's `flakyFailure`/`rerunFailure`: a case that needed a retry is not
//! counted as clean), errored on `<error>` (`flakyError`/`rerunError`),
//! skipped on `<skipped>` or a `status` of `skipped`/`notrun`/`disabled`,
//! and passed otherwise. Failures or errors placed directly in a suite, or
//! counted in the suite's `failures`/`errors`/`skipped` attributes beyond its
//! cases, are kept as suite-level counts so that they are never lost.

use quick_xml::XmlVersion;
use quick_xml::events::{BytesStart, Event};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    Failed,
    Errored,
    Skipped,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// The test's full path (`module::tests::name`).
    pub path: String,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Suite {
    pub name: String,
    pub cases: Vec<Case>,
    /// Failures and errors not attributed to a case (suite-level elements,
    /// or attribute counts higher than the cases show).
    pub unattributed_failures: u64,
    /// Skips counted in the suite's attributes beyond its cases.
    pub unattributed_skips: u64,
}

/// Class names that carry no module path (libtest's JUnit format).
const NO_PATH_CLASSNAMES: [&str; 3] = ["crate", "integration", "unknown"];

fn test_path(suite: &str, classname: &str, name: &str) -> String {
    if classname.is_empty() || classname == suite || NO_PATH_CLASSNAMES.contains(&classname) || name.starts_with(&format!("{classname}::"))
    {
        name.to_string()
    } else {
        format!("{classname}::{name}")
    }
}

fn attr(e: &BytesStart<'_>, key: &str) -> Result<Option<String>, String> {
    for a in e.attributes() {
        let a = a.map_err(|err| format!("bad attribute: {err}"))?;
        if a.key.as_ref() == key {
            return a
                .normalized_value(XmlVersion::Implicit1_0)
                .map(|v| Some(v.into_owned()))
                .map_err(|err| format!("bad attribute value: {err}"));
        }
    }
    Ok(None)
}

fn count(e: &BytesStart<'_>, key: &str) -> Result<u64, String> {
    Ok(attr(e, key)?.and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(0))
}

struct OpenSuite {
    suite: Suite,
    declared_failures: u64,
    declared_skipped: u64,
}

struct OpenCase {
    path: String,
    failed: bool,
    errored: bool,
    skipped: bool,
}

/// Parses one JUnit XML document.
pub fn parse(xml: &str) -> Result<Vec<Suite>, String> {
    let mut reader = quick_xml::Reader::from_str(xml);
    reader.config_mut().check_end_names = true;
    let mut suites: Vec<OpenSuite> = Vec::new();
    let mut done: Vec<Suite> = Vec::new();
    let mut case: Option<OpenCase> = None;
    let mut depth = 0usize;
    let mut root: Option<String> = None;
    loop {
        let event = reader.read_event().map_err(|e| format!("not well-formed XML at byte {}: {e}", reader.error_position()))?;
        let (start, empty) = match &event {
            Event::Start(e) => (Some(e.clone()), false),
            Event::Empty(e) => (Some(e.clone()), true),
            Event::End(e) => {
                depth = depth.saturating_sub(1);
                match e.local_name().as_ref() {
                    "testcase" => finish_case(&mut case, &mut suites, &mut done),
                    "testsuite" => finish_suite(&mut suites, &mut done),
                    _ => {}
                }
                continue;
            }
            Event::Eof => break,
            _ => continue,
        };
        let Some(e) = start else { continue };
        let name = e.local_name().as_ref().to_string();
        if root.is_none() {
            if name != "testsuites" && name != "testsuite" {
                return Err(format!("the root element is <{name}>, not <testsuites> or <testsuite>"));
            }
            root = Some(name.clone());
        }
        if !empty {
            depth += 1;
        }
        match name.as_str() {
            "testsuite" => {
                suites.push(OpenSuite {
                    suite: Suite { name: attr(&e, "name")?.unwrap_or_default(), ..Suite::default() },
                    declared_failures: count(&e, "failures")? + count(&e, "errors")?,
                    declared_skipped: count(&e, "skipped")? + count(&e, "disabled")?,
                });
                if empty {
                    finish_suite(&mut suites, &mut done);
                }
            }
            "testcase" => {
                let suite_name = suites.last().map(|s| s.suite.name.as_str()).unwrap_or("");
                let classname = attr(&e, "classname")?.unwrap_or_default();
                let status = attr(&e, "status")?.unwrap_or_default().to_ascii_lowercase();
                case = Some(OpenCase {
                    path: test_path(suite_name, &classname, &attr(&e, "name")?.unwrap_or_default()),
                    failed: false,
                    errored: false,
                    skipped: matches!(status.as_str(), "skipped" | "notrun" | "disabled"),
                });
                if empty {
                    finish_case(&mut case, &mut suites, &mut done);
                }
            }
            "failure" | "flakyFailure" | "rerunFailure" | "error" | "flakyError" | "rerunError" | "skipped" => {
                let is_error = name.ends_with("rror");
                match (&mut case, name.as_str()) {
                    (Some(c), "skipped") => c.skipped = true,
                    (Some(c), _) if is_error => c.errored = true,
                    (Some(c), _) => c.failed = true,
                    (None, _) => match suites.last_mut() {
                        Some(s) if name == "skipped" => s.suite.unattributed_skips += 1,
                        Some(s) => s.suite.unattributed_failures += 1,
                        None => return Err(format!("<{name}> outside any <testsuite>")),
                    },
                }
            }
            _ => {}
        }
    }
    if depth != 0 || root.is_none() {
        return Err(if root.is_none() { "the file holds no XML element".into() } else { "the XML document is truncated".into() });
    }
    Ok(done)
}

fn finish_case(case: &mut Option<OpenCase>, suites: &mut [OpenSuite], done: &mut Vec<Suite>) {
    let Some(c) = case.take() else { return };
    let outcome = if c.errored {
        Outcome::Errored
    } else if c.failed {
        Outcome::Failed
    } else if c.skipped {
        Outcome::Skipped
    } else {
        Outcome::Passed
    };
    let case = Case { path: c.path, outcome };
    match suites.last_mut() {
        Some(s) => s.suite.cases.push(case),
        // A case outside any suite (some tools): a suite without a name.
        None => done.push(Suite { name: String::new(), cases: vec![case], ..Suite::default() }),
    }
}

fn finish_suite(suites: &mut Vec<OpenSuite>, done: &mut Vec<Suite>) {
    let Some(mut s) = suites.pop() else { return };
    let failed = s.suite.cases.iter().filter(|c| matches!(c.outcome, Outcome::Failed | Outcome::Errored)).count() as u64
        + s.suite.unattributed_failures;
    let skipped = s.suite.cases.iter().filter(|c| c.outcome == Outcome::Skipped).count() as u64;
    s.suite.unattributed_failures += s.declared_failures.saturating_sub(failed);
    s.suite.unattributed_skips += s.declared_skipped.saturating_sub(skipped);
    done.push(s.suite);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nextest_format() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="4" failures="1" errors="0">
  <testsuite name="dpone-core" tests="3" disabled="0" errors="0" failures="1">
    <testcase name="cron::tests::cron" classname="dpone-core" timestamp="2026-01-01T00:00:00Z" time="0.01"/>
    <testcase name="yaml::tests::parses" classname="dpone-core" time="0.01">
      <failure message="assertion failed" type="test failure">thread panicked &amp; more</failure>
      <system-out><![CDATA[<not xml>]]></system-out>
    </testcase>
    <testcase name="window::tests::w" classname="dpone-core"><skipped/></testcase>
  </testsuite>
  <testsuite name="dpone-cli::sqlite_window" tests="1" failures="0" errors="0">
    <testcase name="plan_json" classname="dpone-cli::sqlite_window"><flakyFailure message="x"/></testcase>
  </testsuite>
</testsuites>"#;
        let s = parse(xml).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].name, "dpone-core");
        let outcomes: Vec<(&str, Outcome)> = s[0].cases.iter().map(|c| (c.path.as_str(), c.outcome)).collect();
        assert_eq!(
            outcomes,
            vec![("cron::tests::cron", Outcome::Passed), ("yaml::tests::parses", Outcome::Failed), ("window::tests::w", Outcome::Skipped)]
        );
        assert_eq!(s[0].unattributed_failures, 0);
        assert_eq!(s[1].cases[0].outcome, Outcome::Failed, "a retried case is not clean");
    }

    #[test]
    fn libtest_format() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?><testsuites><testsuite name="test" package="test" id="0" errors="0" failures="0" tests="2" skipped="1" ><testcase classname="yaml::tests" name="parses_with_positions" time="0"/><testcase classname="integration" name="ignored_one" time="0"><skipped/></testcase><system-out/><system-err/></testsuite></testsuites>"#;
        let s = parse(xml).unwrap();
        assert_eq!(s[0].cases[0].path, "yaml::tests::parses_with_positions");
        assert_eq!(s[0].cases[1].path, "ignored_one");
        assert_eq!(s[0].cases[1].outcome, Outcome::Skipped);
        assert_eq!(s[0].unattributed_skips, 0);
    }

    #[test]
    fn suite_level_problems_are_kept() {
        let s =
            parse(r#"<testsuite name="s" tests="1" failures="2" skipped="1"><testcase name="a"/><error message="crashed"/></testsuite>"#)
                .unwrap();
        assert_eq!((s[0].unattributed_failures, s[0].unattributed_skips), (2, 1));
        let s = parse(r#"<testsuite name="s" tests="0"/>"#).unwrap();
        assert!(s[0].cases.is_empty());
        let s =
            parse(r#"<testsuite name="s"><testcase name="a" status="notrun"/><testcase name="b"><error/></testcase></testsuite>"#).unwrap();
        assert_eq!(s[0].cases.iter().map(|c| c.outcome).collect::<Vec<_>>(), vec![Outcome::Skipped, Outcome::Errored]);
    }

    #[test]
    fn malformed_documents_are_errors() {
        assert!(parse("").is_err());
        assert!(parse("not xml").is_err());
        assert!(parse("<html><body/></html>").unwrap_err().contains("root element"));
        assert!(parse(r#"<testsuite name="s"><testcase name="a">"#).unwrap_err().contains("truncated"));
        assert!(parse(r#"<testsuite name="s"><testcase name="a"></testsuite>"#).is_err());
        assert!(parse(r#"<testsuite name="&unknown;"/>"#).is_err());
    }
}
