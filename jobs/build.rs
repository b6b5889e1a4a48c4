//! Names the build for `silt --version`: the commit (`git rev-parse --short HEAD`, or
//! "unknown" where there is no git, e.g. a build from a source tarball), cargo's profile and the
//! package's enabled features. They reach the code as `BUILD_INFO_COMMIT`,
//! `BUILD_INFO_PROFILE` and `BUILD_INFO_FEATURES` (see `src/build_info.rs`): not `SILT_*`,
//! because cargo also sets them in the environment of `cargo run` and `cargo test`, where silt
//! would read a `SILT_*` variable as a configuration key.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    for watched in head_files() {
        println!("cargo:rerun-if-changed={}", watched.display());
    }
    println!("cargo:rustc-env=BUILD_INFO_COMMIT={commit}");
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=BUILD_INFO_PROFILE={profile}");
    let mut features: Vec<String> = std::env::vars()
        .filter_map(|(name, _)| {
            name.strip_prefix("CARGO_FEATURE_")
                .map(|f| f.to_ascii_lowercase().replace('_', "-"))
        })
        .collect();
    features.sort();
    let features = if features.is_empty() {
        "none".to_string()
    } else {
        features.join(",")
    };
    println!("cargo:rustc-env=BUILD_INFO_FEATURES={features}");
}

/// What git answers to `args`, trimmed; `None` without git or outside a repository.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}

/// The files that change when HEAD moves: HEAD itself, the branch it names, and packed-refs
/// (a worktree's HEAD lives apart from the common refs; `--git-path` resolves both). Only the
/// ones that exist, so a tarball build is not rebuilt every time.
fn head_files() -> Vec<PathBuf> {
    let mut paths = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        paths.push(branch);
    }
    paths
        .iter()
        .filter_map(|p| git(&["rev-parse", "--git-path", p]))
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .collect()
}
