//! `MemTarget` as an adapter: its descriptor and how it builds itself from
//! a manifest, registered like a real target (the command line's registry
//! tests, the engine's world). It stands for a SQLite sink (a manifest
//! names it `sqlite`) and publishes like one (`Publication::InPlaceDigest`).

use super::{MemTarget, Publication};
use dpone_core::Diagnostic;
use dpone_core::adapter::{PublicationText, TRANSACTIONAL_APPEND, TRANSACTIONAL_MERGE, TargetAdapter, TargetDescriptor};
use dpone_core::manifest::{Manifest, System};
use dpone_core::ports::Wiring;

pub static DESCRIPTOR: TargetDescriptor = TargetDescriptor {
    append: Some(TRANSACTIONAL_APPEND),
    merge: Some(TRANSACTIONAL_MERGE),
    ..TargetDescriptor::new(
        System::named("sqlite"),
        &[System::named("sqlite")],
        "in-memory staging tables",
        PublicationText {
            method: "memory_transaction",
            description: "one in-memory transaction replaces the target's rows with the verified generation",
        },
    )
};

impl TargetAdapter for MemTarget {
    const DESCRIPTOR: &'static TargetDescriptor = &DESCRIPTOR;

    /// An empty store without the target table `sink.table`.
    fn build(manifest: &Manifest, _: &Wiring) -> Result<Self, Diagnostic> {
        Ok(MemTarget::without_table(Publication::InPlaceDigest, &manifest.sink.table.name))
    }
}
