//! How a target builds the replacement generation, and how a publication ended.

use serde::Serialize;

/// How a target put the verified chunks into the generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GenerationBuild {
    /// Rows were copied (re-written): the generation must be re-digested.
    Copied,
    /// The staging tables' storage was attached by hard link: the chunk rows
    /// are the verified staging bytes themselves and need only be counted.
    Linked,
    /// The generation holds only the new rows: the publication replaces the
    /// window in place and never touches rows outside it (see
    /// [`Target::keeps_rows_in_place`]).
    WindowOnly,
    /// Like [`GenerationBuild::WindowOnly`], but the generation is a view
    /// over the verified staging tables themselves: nothing was copied, so
    /// it is counted, not re-digested.
    WindowOnlyView,
}

/// Outcome of an atomic publication, judged from the target's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PublicationOutcome {
    /// The generation is the visible target.
    Published,
    /// Nothing changed; the previous target is still visible.
    Absent,
    /// The target's state could not be established.
    Unknown,
}
