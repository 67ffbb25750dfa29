//! Arbitrary bytes as a route-memory file (a corrupt, truncated or hostile file on disk).
//! Decoding never panics; a failed decode leaves the store as it was; what decodes stays
//! within the configured bounds, and re-encoding and decoding it again gives the same store.
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run memory_file`.
#![no_main]

use fastfallback_proto::Instant;
use fastfallback_route::{MAX_FILE_BYTES, RouteDatabase, RouteMemory};
use libfuzzer_sys::fuzz_target;

const WALL: u64 = 1_800_000_000;

fuzz_target!(|data: &[u8]| {
    let config = RouteMemory::default();
    let db = RouteDatabase::new(config);
    let now = Instant::from_millis(600_000);
    let before = db.encode(now, WALL);
    match db.decode_into(data, now, WALL) {
        Err(_) => assert_eq!(db.encode(now, WALL), before, "a failed decode changed the store"),
        Ok(()) => {
            for network in db.networks() {
                assert!(db.len(network) <= config.max_routes, "{network:?} over the bound");
            }
            let encoded = db.encode(now, WALL);
            assert!(encoded.len() <= MAX_FILE_BYTES);
            let again = RouteDatabase::new(config);
            again
                .decode_into(&encoded, now, WALL)
                .expect("our own encoding decodes");
            assert_eq!(again.encode(now, WALL), encoded, "encode ∘ decode is stable");
        }
    }
});
