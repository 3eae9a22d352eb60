//! The compare-and-set of an incremental target's mark, written once for
//! every target: what a publication moves, and the refusals when the
//! stored mark is no longer the one the caller saw.

use super::{AdapterError, Result};
use crate::incremental::{StoredMark, receipt_identity};

/// An incremental publication of the verified batch in `generation`: in
/// its transaction the stored mark must still be `before` (the one the
/// batch was read after), and `after` is stored with the rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkedPublication<'a> {
    pub generation: &'a str,
    pub before: Option<&'a StoredMark>,
    pub after: &'a StoredMark,
}

impl MarkedPublication<'_> {
    /// `before` and `after`, owned (for a closure run on another thread).
    pub fn owned_marks(&self) -> (Option<StoredMark>, StoredMark) {
        (self.before.cloned(), self.after.clone())
    }
}

/// A publication's check, in its transaction: the stored mark `now` is
/// still `before`, the one the batch was read after; else
/// `incremental_mark_moved` (a `Verification` error: nothing was published).
pub fn check_publication_unmoved(now: Option<&StoredMark>, before: Option<&StoredMark>) -> Result<()> {
    if now == before {
        return Ok(());
    }
    Err(AdapterError::verification(
        "incremental_mark_moved",
        format!("the target's mark is {} but the batch was read after {}", receipt_identity(now), receipt_identity(before)),
    ))
}

/// An operator's reset (`Target::reset_mark`): the stored mark `now` is
/// still `before`, the one the operator saw; else `incremental_mark_moved`
/// (permanent: nothing was changed).
pub fn check_reset_unmoved(now: Option<&StoredMark>, before: Option<&StoredMark>) -> Result<()> {
    if now == before {
        return Ok(());
    }
    Err(AdapterError::permanent(
        "incremental_mark_moved",
        format!("the target's mark is {} but the reset expected {}", receipt_identity(now), receipt_identity(before)),
    ))
}

/// The hint of a refused reset.
pub const RESET_MOVED_HINT: &str =
    "the mark moved since it was read (a run, or another reset); nothing was changed: look at `dpone state show` and reset again";
