//! What `silt --version` says about the build, as `build.rs` found it: the commit
//! (`git rev-parse --short HEAD`, "unknown" without git), cargo's profile (`debug` or
//! `release`) and the enabled features of this package (`fault-injection` in test builds,
//! "none" in the product).

/// The short commit hash the binary was built from, or "unknown".
pub const COMMIT: &str = env!("BUILD_INFO_COMMIT");

/// Cargo's profile: `debug` (dev and test builds) or `release`.
pub const PROFILE: &str = env!("BUILD_INFO_PROFILE");

/// The enabled features of silt-jobs, comma-separated, or "none".
pub const FEATURES: &str = env!("BUILD_INFO_FEATURES");

/// `silt --version`: `0.1.0 (commit b40e719, release build, features: none)`.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("BUILD_INFO_COMMIT"),
    ", ",
    env!("BUILD_INFO_PROFILE"),
    " build, features: ",
    env!("BUILD_INFO_FEATURES"),
    ")"
);
