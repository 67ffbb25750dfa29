//! Layout facts the driver's speed depends on, found with the benches (docs/benchmarks.md).

use fastfallback_plan::FastFallbackExchangeFinder;

/// glibc serves a request of up to 1 000 bytes from its small bins (chunks below 1 024
/// bytes, with 8 bytes of header, 16-byte aligned); a larger one takes the large-bin path,
/// which first consolidates every freed small chunk. With 100 races in flight, glibc's
/// per-size cache (7 chunks) is empty, so each `boxed` finder takes one of those paths:
/// 8 bytes more here cost ~400 instructions per connect (the instructions bench's
/// 100-in-flight column).
#[test]
#[cfg(target_pointer_width = "64")]
fn the_boxed_finder_stays_inside_glibcs_small_chunk_range() {
    let size = size_of::<FastFallbackExchangeFinder>();
    assert!(
        size <= 1000,
        "FastFallbackExchangeFinder is {size} bytes; keep it at 1 000 or less"
    );
}
