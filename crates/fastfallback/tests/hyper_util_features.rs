//! A user's hyper-util client speaks HTTP/2 whatever features they declared: our connector
//! offers `h2` by ALPN and marks h2 connections with `negotiated_h2`, and hyper-util built
//! without its `http2` feature panics on such a connection ("http2 feature is not enabled").
//! Cargo unifies one crate's features across the graph, so the driver's own dependency on
//! hyper-util turns `http2` on for everyone. Development dependencies do not count for users,
//! hence `-e normal`.

use std::process::Command;

#[test]
fn the_driver_turns_on_hyper_utils_http2_for_every_user() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--locked",
            "--offline",
            "-p",
            "fastfallback",
            "-e",
            "normal,features",
            "-i",
            "hyper-util",
        ])
        .current_dir(root)
        .output()
        .expect("cargo tree runs");
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        tree.contains("hyper-util feature \"http2\""),
        "hyper-util's http2 feature comes only from development dependencies:\n{tree}"
    );
}
