//! The preset files a batch manifest's conventions name (`convention:
//! team.yaml`), read relative to the manifest's folder with the manifest's
//! own bounds (a regular file of at most 1 MiB, UTF-8). A name that is no
//! file is left out: loading reports it as `unknown_convention`, naming
//! the built-in conventions.

use crate::commands::{base_dir, read_manifest};
use dpone_core::manifest::convention::preset_references;
use dpone_core::manifest::{PresetFile, Presets};
use std::path::Path;

/// The presets `text` (the manifest at `manifest_path`) names, as read.
pub fn read_presets(manifest_path: &Path, text: &str) -> Presets {
    let dir = base_dir(manifest_path);
    preset_references(text)
        .into_iter()
        .filter_map(|name| {
            let path = dir.join(&name);
            // The original: a name that is not an existing path is an unknown convention.
            if std::fs::symlink_metadata(&path).is_err() {
                return None;
            }
            let shown = path.display().to_string();
            let file = match read_manifest(&path) {
                Ok(text) => PresetFile::Text { path: shown, text },
                Err(d) => PresetFile::Unreadable { path: shown, reason: d.message },
            };
            Some((name, file))
        })
        .collect()
}
