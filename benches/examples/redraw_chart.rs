//! Redraws docs/img/scenarios.svg from the last `target/fastfallback-bench/scenarios.json`,
//! without re-running the (root, four-minute) scenario bench: `cargo run -p
//! fastfallback-benches --example redraw_chart`. The bench itself redraws it after each run.

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let json = root.join("target/fastfallback-bench/scenarios.json");
    let text = match std::fs::read_to_string(&json) {
        Ok(t) => t,
        Err(e) => {
            eprintln!(
                "{}: {e} (run `cargo bench -p fastfallback-benches --bench scenarios` first)",
                json.display()
            );
            std::process::exit(1);
        }
    };
    let value: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let out = root.join("docs/img/scenarios.svg");
    match fastfallback_benches::chart::write_scenarios_chart(
        &value["network"],
        std::slice::from_ref(&out),
    ) {
        Ok(()) => println!("written: {}", out.display()),
        Err(e) => {
            eprintln!("no chart: {e}");
            std::process::exit(1);
        }
    }
}
