# Recipes for fastfallback. Nothing here is required: the README's plain cargo commands work
# without `just` (install it with `cargo install just`).

# The main job: canned races on virtual time, with their timelines.
demo:
    cargo run --release -p fastfallback-cli -- demo

# The test suite, exactly as CI runs it (.ci/run).
test:
    bash .ci/run

# Benchmarks: criterion (target/criterion) and the network scenarios against peers
# (needs root; target/fastfallback-bench/scenarios.{json,md}).
bench:
    cargo bench -p fastfallback-benches -- --noplot

# Fuzz the race with arbitrary event sequences (needs `cargo install cargo-fuzz`).
fuzz target="plan_events" seconds="60":
    cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run {{target}} -- -max_total_time={{seconds}}

# The full soak through the pool under faults (root): 10 000 calls, 500 at a time.
soak:
    FASTFALLBACK_SOAK_CALLS=10000 FASTFALLBACK_SOAK_CONCURRENCY=500 cargo test --release -p fastfallback-net --test soak -- --nocapture
