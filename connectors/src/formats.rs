//! The lake formats `lake.format` may name, and the one the product uses by default. The only
//! module that names a format's implementation; everything else asks through
//! [`crate::lake_format::LakeFormat`].

use std::sync::Arc;

use crate::lake_format::LakeFormat;

/// The formats `lake.format` may name.
pub const FORMATS: &[&str] = &["delta"];

/// The format `lake.format` names; an unknown name is an error naming the known ones.
pub fn format_named(name: &str) -> anyhow::Result<Arc<dyn LakeFormat>> {
    match name {
        "delta" => Ok(default_format()),
        other => anyhow::bail!(
            "lake.format {other:?} is not a lake format silt has (known: {}); set lake.format: delta",
            FORMATS.join(", ")
        ),
    }
}

/// The product's lake format: Delta Lake.
pub fn default_format() -> Arc<dyn LakeFormat> {
    Arc::new(crate::delta::DeltaFormat)
}

impl Default for crate::lake_format::LakeSettings {
    /// The product's defaults (`conf/silt.yaml` documents each).
    fn default() -> Self {
        use crate::delta::{DeltaSinkConfig, KEY_INDEX_CACHE_BYTES_DEFAULT, Retention};
        crate::lake_format::LakeSettings {
            target_file_bytes: DeltaSinkConfig::TARGET_FILE_BYTES_DEFAULT,
            deletion_vectors: true,
            file_retention: Retention::FILES_DEFAULT,
            key_index_cache_bytes: KEY_INDEX_CACHE_BYTES_DEFAULT,
            vacuum_removes_bytes_max: DeltaSinkConfig::VACUUM_REMOVES_BYTES_DEFAULT,
        }
    }
}
