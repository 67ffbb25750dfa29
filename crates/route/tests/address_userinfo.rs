//! Userinfo never shows in an origin's parse error (issue 21 item 10): a password holding an
//! unencoded `/`, `?` or `#` ends the authority inside the userinfo (RFC 3986 §3.2), and what
//! is left of it must not be quoted back.

use fastfallback_route::{Address, AddressError};

#[test]
fn a_password_holding_a_slash_question_mark_or_hash_never_shows_in_the_parse_error() {
    // RFC 3986 §3.2: the authority ends at the first '/', '?' or '#', so an unencoded one
    // in a password cuts the authority inside the userinfo: what is left of it reads as a
    // host and port, and their errors used to quote it (`port "pa" is not a number`).
    for (url, secrets) in [
        ("https://user:zq/xv@example.com", &["zq", "xv"][..]),
        ("https://user:zq?xv@example.com", &["zq", "xv"]),
        ("https://user:zq#xv@example.com", &["zq", "xv"]),
        ("user:zq/xv@example.com:443", &["zq", "xv"]),
        ("https://jq@wk:zq/xv@example.com", &["wk", "zq"]),
        ("https://user:z-q.x/xv@example.com", &["z-q.x"]),
        ("https://jq wk:1/xv@example.com", &["jq wk", "' '"]),
        ("https://-jqwk:1/xv@example.com", &["jqwk"]),
    ] {
        let e = Address::parse(url).unwrap_err();
        let (shown, debug) = (e.to_string(), format!("{e:?}"));
        for secret in secrets {
            assert!(!shown.contains(secret), "{url}: {shown}");
            assert!(!debug.contains(secret), "{url}: {debug}");
        }
    }
    let e = Address::parse("https://user:zq/xv@example.com").unwrap_err();
    assert_eq!(e, AddressError::HidesUserinfo);
    assert!(e.to_string().contains("user or password"), "{e}");
}

#[test]
fn an_at_sign_in_the_path_keeps_valid_origins_valid_and_errors_about_names_plain() {
    let a = Address::parse("https://social.example/@alice").unwrap();
    assert_eq!(a.to_string(), "https://social.example:443");
    // Without an '@' after the authority nothing can be a password: the error is exact.
    assert_eq!(
        Address::parse("https://example.com:pa/ss"),
        Err(AddressError::BadPort("pa".into()))
    );
}

#[test]
fn userinfo_is_dropped_and_never_shown() {
    let a = Address::parse("https://user:s3cret@example.com:8443/p").unwrap();
    assert_eq!(a.to_string(), "https://example.com:8443");
    assert!(!format!("{a:?}").contains("s3cret"));
    for bad in [
        "https://user:s3cret@exa mple.com",
        "https://user:s3cret@example.com:99999",
        "https://user:s3cret@",
        "https://user:s3cret@[::1",
    ] {
        let e = Address::parse(bad).unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{bad}: {e}");
        assert!(!format!("{e:?}").contains("s3cret"), "{bad}: {e:?}");
    }
}

#[test]
fn a_colon_in_the_userinfo_is_not_the_port_separator() {
    let a = Address::parse("http://user:pw@example.com").unwrap();
    assert_eq!(
        (a.host().to_string().as_str(), a.port()),
        ("example.com", 80)
    );
    let a = Address::parse("tcp://u:p@[2001:db8::1]:7").unwrap();
    assert_eq!(a.port(), 7);
    // After the userinfo, two colons make a bare IPv6 literal, which has no port.
    assert_eq!(
        Address::parse("tcp://u:p@2001:db8::1"),
        Err(AddressError::MissingPort)
    );
    assert_eq!(Address::parse("u:p@192.0.2.1:9").unwrap().port(), 9);
}
