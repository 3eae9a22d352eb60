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
    check_unmoved(now, before, "the batch was read after").map_err(|(code, message)| AdapterError::verification(code, message))
}

/// An operator's reset (`Target::reset_mark`): the stored mark `now` is
/// still `before`, the one the operator saw; else `incremental_mark_moved`
/// (permanent: nothing was changed).
pub fn check_reset_unmoved(now: Option<&StoredMark>, before: Option<&StoredMark>) -> Result<()> {
    check_unmoved(now, before, "the reset expected").map_err(|(code, message)| AdapterError::permanent(code, message))
}

/// The compare-and-set of both: `incremental_mark_moved` and its message
/// when the stored mark `now` is not `before` (`seen`: whose mark `before` is).
fn check_unmoved(now: Option<&StoredMark>, before: Option<&StoredMark>, seen: &str) -> std::result::Result<(), (&'static str, String)> {
    if now == before {
        return Ok(());
    }
    Err(("incremental_mark_moved", format!("the target's mark is {} but {seen} {}", receipt_identity(now), receipt_identity(before))))
}

/// The hint of a refused reset.
pub const RESET_MOVED_HINT: &str =
    "the mark moved since it was read (a run, or another reset); nothing was changed: look at `dpone state show` and reset again";

/// The incremental methods of [`Target`](super::Target) (`read_mark`,
/// `publish_append`, `check_merge`, `publish_merge`, `reset_mark`), inside
/// an `impl Target` block, each calling the target's own method named in
/// that order: e.g.
/// `target_marks! { read_mark_here, publish_append_here, check_merge_here, publish_merge_here, reset_mark_here }`.
#[macro_export]
macro_rules! target_marks {
    ($read:ident, $append:ident, $check:ident, $merge:ident, $reset:ident $(,)?) => {
        async fn read_mark(&self) -> $crate::ports::Result<Option<$crate::incremental::StoredMark>> {
            self.$read().await
        }

        async fn publish_append(
            &self,
            publication: $crate::ports::MarkedPublication<'_>,
            rows: u64,
        ) -> $crate::ports::Result<$crate::ports::PublicationOutcome> {
            self.$append(publication, rows).await
        }

        async fn check_merge(&self, generation: &str, key: &$crate::ports::MergeKey) -> $crate::ports::Result<$crate::ports::MergeCounts> {
            self.$check(generation, key).await
        }

        async fn publish_merge(
            &self,
            publication: $crate::ports::MarkedPublication<'_>,
            key: &$crate::ports::MergeKey,
            expected: $crate::ports::MergeCounts,
        ) -> $crate::ports::Result<$crate::ports::PublicationOutcome> {
            self.$merge(publication, key, expected).await
        }

        async fn reset_mark(
            &self,
            before: Option<&$crate::incremental::StoredMark>,
            after: Option<&$crate::incremental::StoredMark>,
        ) -> $crate::ports::Result<()> {
            self.$reset(before, after).await
        }
    };
}
