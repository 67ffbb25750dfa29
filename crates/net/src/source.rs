//! Source address selection for RFC 6724, asked of the kernel.
//!
//! RFC 6724 §6 sorts destinations by the source address the host would use for each (rules 1,
//! 2, 5, 6, 8 and 9 compare them). The kernel knows: connecting a UDP socket runs route lookup
//! and source selection without sending a packet, and `getsockname` then reports the source.
//! A destination with no route has no source and is "unusable" (RFC 6724 §6 rule 1).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fastfallback_route::{Source, SourceSelector};
use socket2::{Domain, SockAddr, Socket, Type};

use crate::SocketOptions;

/// The prefix length assumed for a probed IPv6 source: the kernel does not say, and /64 is the
/// subnet size of almost every IPv6 network (RFC 7421).
const V6_PREFIX_LEN: u8 = 64;

/// How long a probed source is believed. The connector also forgets every answer when the
/// network changes.
const SOURCE_TTL: Duration = Duration::from_secs(30);

/// [`SourceSelector`] backed by the kernel's routing table (the "UDP connect" probe).
///
/// It honours the connector's local addresses and interface, so the sort sees the sources the
/// attempts will really use. The driver asks it outside the race, once per destination, and
/// hands the answers in with each DNS answer; answers are cached for half a minute, so a
/// second contact costs no system calls.
#[derive(Debug)]
pub struct KernelSources {
    local_v4: Option<Ipv4Addr>,
    local_v6: Option<Ipv6Addr>,
    interface: Option<String>,
    cache: Mutex<HashMap<IpAddr, (Option<Source>, Instant)>>,
}

impl KernelSources {
    /// A probe that binds like the attempts do.
    pub fn new(options: &SocketOptions) -> Self {
        Self {
            local_v4: options.local_v4,
            local_v6: options.local_v6,
            interface: options.interface.clone(),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Forgets every cached answer (the network changed).
    pub fn clear(&self) {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    fn probe(&self, dst: IpAddr) -> std::io::Result<IpAddr> {
        let socket = Socket::new(
            Domain::for_address(SocketAddr::new(dst, 0)),
            Type::DGRAM,
            None,
        )?;
        if let Some(dev) = &self.interface {
            socket.bind_device(Some(dev.as_bytes()))?;
        }
        let local = match dst {
            IpAddr::V4(_) => self.local_v4.map(IpAddr::V4),
            IpAddr::V6(_) => self.local_v6.map(IpAddr::V6),
        };
        if let Some(ip) = local {
            socket.bind(&SockAddr::from(SocketAddr::new(ip, 0)))?;
        }
        // The port only has to be non-zero; connect() on UDP sends nothing.
        socket.connect(&SockAddr::from(SocketAddr::new(dst, 9)))?;
        let udp = UdpSocket::from(socket);
        Ok(udp.local_addr()?.ip().to_canonical())
    }
}

impl SourceSelector for KernelSources {
    fn source_for(&self, dst: IpAddr) -> Option<Source> {
        let dst = dst.to_canonical();
        let now = Instant::now();
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((source, at)) = cache.get(&dst)
            && now.duration_since(*at) < SOURCE_TTL
        {
            return *source;
        }
        let source = self.probe(dst).ok().map(|ip| {
            let len = if ip.is_ipv4() { 32 } else { V6_PREFIX_LEN };
            Source::new(ip, len)
        });
        if cache.len() >= 4096 {
            cache.clear();
        }
        cache.insert(dst, (source, now));
        source
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_destinations_get_loopback_sources() {
        let probe = KernelSources::new(&SocketOptions::default());
        let v4 = probe
            .source_for("127.0.0.1".parse().unwrap())
            .expect("v4 loopback");
        assert_eq!(v4.addr, "127.0.0.1".parse::<IpAddr>().unwrap());
        // Not every machine has IPv6 loopback; when it does, the source is ::1 itself.
        if let Some(v6) = probe.source_for("::1".parse().unwrap()) {
            assert_eq!(v6.addr, "::1".parse::<IpAddr>().unwrap());
        }
    }

    #[test]
    fn a_local_address_that_does_not_exist_makes_the_destination_unusable() {
        let options = SocketOptions {
            // TEST-NET-2 is never assigned to a local interface.
            local_v4: Some("198.51.100.77".parse().unwrap()),
            ..SocketOptions::default()
        };
        let probe = KernelSources::new(&options);
        assert_eq!(probe.source_for("127.0.0.1".parse().unwrap()), None);
    }
}
