//! The minimum supported Rust version, checked without a second toolchain.
//!
//! The MSRV is the workspace's `rust-version`; the README states it. Three checks hold it:
//! - clippy's `incompatible_msrv` lint (on by default, denied in CI) reads `rust-version` and
//!   rejects any standard-library item stabilised after it;
//! - the resolver (`resolver = "3"`) prefers dependency versions whose own `rust-version` fits;
//! - this test: every package in the locked dependency graph declares a `rust-version` no
//!   newer than ours (a package that declares none is not counted against us), and the README
//!   names the same version.

use std::process::Command;

fn version(v: &str) -> (u64, u64, u64) {
    let mut parts = v.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

#[test]
fn no_locked_dependency_needs_a_newer_rust_than_the_stated_msrv() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(root)
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata --locked failed (is Cargo.lock current?): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let msrv = packages
        .iter()
        .find(|p| p["name"] == "fastfallback")
        .and_then(|p| p["rust_version"].as_str())
        .expect("the workspace states a rust-version")
        .to_owned();
    let too_new: Vec<String> = packages
        .iter()
        .filter_map(|p| {
            let needs = p["rust_version"].as_str()?;
            (version(needs) > version(&msrv))
                .then(|| format!("{} {} needs {needs}", p["name"], p["version"]))
        })
        .collect();
    assert!(too_new.is_empty(), "MSRV {msrv}, but: {too_new:#?}");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    assert!(
        readme.contains(&format!("Rust {msrv}")),
        "the README must state the MSRV (Rust {msrv})"
    );
}
