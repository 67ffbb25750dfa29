//! Tests of hosts, addresses and routes: parsing, rejection reasons, zones and display.

use super::*;

#[test]
fn names_are_lowercased_and_trailing_dot_dropped() {
    assert_eq!(
        "Example.COM.".parse::<Host>(),
        Ok(Host::Name("example.com".into()))
    );
}

#[test]
fn an_ipv4_literal_with_a_root_dot_is_that_address_not_a_name() {
    let ip: IpAddr = "0.0.0.0".parse().unwrap();
    assert_eq!("0.0.0.0.".parse::<Host>(), Ok(Host::Ip(ip)));
    let a = Address::parse("http://192.0.2.1.:8080").unwrap();
    assert_eq!(a.host(), &Host::Ip("192.0.2.1".parse().unwrap()));
    assert_eq!(a.to_string(), "http://192.0.2.1:8080");
    // Only one root dot, as for a name.
    assert_eq!("1.2.3.4..".parse::<Host>(), Err(AddressError::EmptyLabel));
}

#[test]
fn a_host_ending_in_a_number_that_is_no_dotted_quad_is_rejected_not_resolved() {
    for host in [
        "1.2.3",
        "1.2.3.",
        "10.0.0.256",
        "2130706433",
        "0x7f.1",
        "a.0X",
        "x.010",
    ] {
        let e = host.parse::<Host>().unwrap_err();
        assert!(matches!(e, AddressError::NumericName(_)), "{host}: {e:?}");
        assert!(e.to_string().contains("ends in a number"), "{e}");
    }
    let e = Address::parse("http://1.2.3:8080").unwrap_err();
    assert_eq!(e, AddressError::NumericName("1.2.3".into()));
    // A label that only starts with digits, or a hex-looking one without `0x`, is a name.
    for host in [
        "1.2.3a",
        "example.com1",
        "a.0xg",
        "cafe.beef",
        "123.example",
    ] {
        assert!(matches!(host.parse::<Host>(), Ok(Host::Name(_))), "{host}");
    }
}

#[test]
fn malformed_names_are_rejected_with_the_reason() {
    assert_eq!("".parse::<Host>(), Err(AddressError::EmptyHost));
    assert_eq!("a..b".parse::<Host>(), Err(AddressError::EmptyLabel));
    let long_label = "a".repeat(64);
    assert!(matches!(
        long_label.parse::<Host>(),
        Err(AddressError::LabelTooLong(_))
    ));
    let long_name = vec!["a".repeat(60); 5].join(".");
    assert!(matches!(
        long_name.parse::<Host>(),
        Err(AddressError::NameTooLong(304))
    ));
    assert_eq!(
        "a\0b".parse::<Host>(),
        Err(AddressError::InvalidCharacter('\0'))
    );
    assert_eq!(
        "a b".parse::<Host>(),
        Err(AddressError::InvalidCharacter(' '))
    );
    assert!(matches!(
        "-a.com".parse::<Host>(),
        Err(AddressError::BadHyphen(_))
    ));
}

#[test]
fn ip_literals_parse_with_and_without_brackets() {
    let v6: IpAddr = "2001:db8::a".parse().unwrap();
    assert_eq!("2001:db8::a".parse::<Host>(), Ok(Host::Ip(v6)));
    assert_eq!("[2001:db8::a]".parse::<Host>(), Ok(Host::Ip(v6)));
    assert_eq!(
        "192.0.2.1".parse::<Host>(),
        Ok(Host::Ip("192.0.2.1".parse().unwrap()))
    );
}

#[test]
fn ipv4_mapped_literal_is_treated_as_ipv4() {
    assert_eq!(
        "::ffff:192.0.2.1".parse::<Host>(),
        Ok(Host::Ip("192.0.2.1".parse().unwrap()))
    );
}

#[test]
fn uris_parse_with_default_ports() {
    let a = Address::parse("http://example.com/path?q").unwrap();
    assert_eq!((a.port(), a.scheme()), (80, Scheme::Http));
    let a = Address::parse("https://[2001:db8::a]:8443/").unwrap();
    assert_eq!(a.port(), 8443);
    assert_eq!(a.host(), &Host::Ip("2001:db8::a".parse().unwrap()));
    let a = Address::parse("example.com:7000").unwrap();
    assert_eq!((a.port(), a.scheme()), (7000, Scheme::Tcp));
}

#[test]
fn bad_uris_are_rejected_with_the_reason() {
    assert_eq!(Address::parse("https://"), Err(AddressError::MissingHost));
    assert_eq!(Address::parse("https://:443"), Err(AddressError::EmptyHost));
    assert_eq!(
        Address::parse("https://a.com:0"),
        Err(AddressError::PortZero)
    );
    assert!(matches!(
        Address::parse("https://a.com:99999"),
        Err(AddressError::BadPort(_))
    ));
    assert!(matches!(
        Address::parse("gopher://a.com"),
        Err(AddressError::UnsupportedScheme(_))
    ));
    assert_eq!(Address::parse("a.com"), Err(AddressError::MissingPort));
    assert_eq!(Address::parse("a.com:"), Err(AddressError::MissingPort));
}

#[test]
fn schemes_are_case_insensitive() {
    assert_eq!(
        Address::parse("HTTPS://Example.com").unwrap().scheme(),
        Scheme::Https
    );
}

#[test]
fn an_unclosed_bracket_is_named() {
    let e = Address::parse("http://[::1").unwrap_err();
    assert_eq!(e, AddressError::UnclosedBracket);
    assert_eq!(e.to_string(), "IPv6 literal has an unclosed '['");
    assert_eq!(
        Address::parse("tcp://[2001:db8::1:80").unwrap_err(),
        AddressError::UnclosedBracket
    );
}

#[test]
fn a_missing_port_is_named() {
    let e = Address::parse("example.com").unwrap_err();
    assert_eq!(e.to_string(), "port is missing (write host:port)");
}

#[test]
fn link_local_literals_keep_their_zone() {
    let a = Address::parse("http://[fe80::1%2]:80").unwrap();
    assert_eq!(a.host(), &Host::Ip("fe80::1".parse().unwrap()));
    assert_eq!(a.scope_id(), Some(2));
    let b = Address::parse("https://[fe80::1%25eth0]/x").unwrap();
    assert_eq!(b.zone(), Some(&Zone::Name("eth0".into())));
    assert_eq!(b.port(), 443);
    assert_eq!(b.to_string(), "https://[fe80::1%25eth0]:443");
    let c = Address::parse("[fe80::1%eth0]:7").unwrap();
    assert_eq!(c.zone(), Some(&Zone::Name("eth0".into())));
    // `%25` alone is the zone index 25, not an empty encoded zone.
    assert_eq!(
        Address::parse("[fe80::1%25]:7").unwrap().scope_id(),
        Some(25)
    );
}

#[test]
fn an_address_is_one_pointer_and_a_changed_clone_leaves_the_original_alone() {
    // A race, a pool key and a report each clone the origin: one reference count.
    assert_eq!(size_of::<Address>(), size_of::<usize>());
    let a = Address::parse("http://[fe80::1%eth0]:80").unwrap();
    let b = a.clone();
    assert!(Arc::ptr_eq(&a.0, &b.0));
    let zoned = b.with_zone(Zone::Index(3));
    let proxied = a
        .clone()
        .with_proxy(Proxy::parse("http://192.0.2.9:3128").unwrap());
    // Copied on write: the original keeps its zone and has no proxy.
    assert_eq!(a.zone(), Some(&Zone::Name("eth0".into())));
    assert!(a.proxy().is_none());
    assert_eq!(zoned.scope_id(), Some(3));
    assert_eq!(proxied.connect_host().1, 3128);
    assert_eq!(proxied.zone(), a.zone());
    // Equality and hashing follow the parts, not the pointer.
    assert_eq!(a, Address::parse("http://[fe80::1%25eth0]:80").unwrap());
    assert_ne!(a, zoned);
}

#[test]
fn bad_zones_are_rejected() {
    assert_eq!(
        Address::parse("[fe80::1%]:7"),
        Err(AddressError::BadZone(String::new()))
    );
    assert!(matches!(
        Address::parse("[fe80::1%e/th]:7"),
        Err(AddressError::BadPort(_) | AddressError::BadZone(_) | AddressError::UnclosedBracket)
    ));
    assert_eq!(
        Address::parse("[fe80::1%eth 0]:7"),
        Err(AddressError::BadZone("eth 0".into()))
    );
}

#[test]
fn localhost_names_are_recognised() {
    assert!("localhost".parse::<Host>().unwrap().is_localhost());
    assert!("app.localhost".parse::<Host>().unwrap().is_localhost());
    assert!(!"localhost.example".parse::<Host>().unwrap().is_localhost());
    assert!(!"notlocalhost".parse::<Host>().unwrap().is_localhost());
}

#[test]
fn route_display_names_nat64_and_proxy() {
    let mut r = Route::direct("[64:ff9b::c000:201]:443".parse().unwrap());
    r.logical = "192.0.2.1".parse().unwrap();
    assert_eq!(
        r.to_string(),
        "[64:ff9b::c000:201]:443 (NAT64 for 192.0.2.1)"
    );
}
