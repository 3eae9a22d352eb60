//! The `dpone` binary; everything lives in the library (`lib.rs`), so that
//! test builds can switch on its test-only feature.

fn main() -> std::process::ExitCode {
    dpone_cli::main()
}
