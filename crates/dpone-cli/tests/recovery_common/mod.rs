//! Source and target fixtures of the crash-recovery tests (`recovery_*.rs`,
//! `crash_matrix.rs`), which run the real `dpone` binary through `harness`
//! (declared at their crate root), make it abort at a failpoint
//! (`DPONE_FAILPOINT=<name>[:<n>]`: SIGABRT, no destructors, no cleanup, as
//! close to `kill -9` as a test gets), run the same command again and
//! compare the target with the expected multiset of rows exactly.
//!
//! - `pgch.rs`: a PostgreSQL source schema and a ClickHouse target database
//!   per test (typed rows, decoded from `FORMAT RowBinary`);
//! - `sqlite.rs`: SQLite source and target files per test.
#![allow(dead_code)]

pub mod pgch;
pub mod sqlite;
