//! Arbitrary text as origins, hosts and proxy URLs. Parsing never panics; what parses
//! prints back to something that parses to the same value; a rejected proxy URL never
//! echoes its password. Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run address_parse`.
#![no_main]

use fastfallback_route::{Address, Host, Proxy};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(a) = Address::parse(text) {
        assert!(a.port() != 0);
        let printed = a.to_string();
        // Userinfo is dropped at parse time, never kept.
        assert!(!printed.contains('@'), "{printed}");
        let again = Address::parse(&printed).unwrap_or_else(|e| panic!("{printed}: {e}"));
        assert_eq!(again.host(), a.host(), "{text:?} → {printed}");
        assert_eq!(again.port(), a.port());
        assert_eq!(again.scheme(), a.scheme());
    }
    if let Ok(h) = text.parse::<Host>() {
        let printed = h.to_string();
        assert_eq!(printed.parse::<Host>().as_ref(), Ok(&h), "{text:?} → {printed}");
    }
    // A proxy URL whose password is a marker: neither the parsed value's Display/Debug nor
    // the error may show it.
    // (Only when the rest of the URL does not hold the marker itself.)
    if text.contains("MARKERpw") {
        return;
    }
    let url = format!("http://user:MARKERpw@{text}");
    match Proxy::parse(&url) {
        Ok(p) => {
            assert!(!format!("{p} {p:?}").contains("MARKERpw"));
            // (An unencoded '@' in the input ends up in the password: the last '@' splits.)
            let password = p.credentials.as_ref().map(|c| c.password()).unwrap_or("");
            assert!(password.starts_with("MARKERpw"), "{password:?}");
        }
        Err(e) => assert!(!e.to_string().contains("MARKERpw"), "{e}"),
    }
});
