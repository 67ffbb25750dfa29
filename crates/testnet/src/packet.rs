//! Just enough IPv4/IPv6/TCP/UDP parsing to classify packets, and the packets the wire makes
//! itself (TCP RST, ICMP and ICMPv6 destination unreachable), with correct checksums.
//!
//! Nothing here panics, whatever the input: every read is bounds-checked, and a packet that
//! cannot be understood yields `None` (the wire then passes it on untouched).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// IP protocol number of ICMP.
pub(crate) const PROTO_ICMP: u8 = 1;
/// IP protocol number of TCP.
pub(crate) const PROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub(crate) const PROTO_UDP: u8 = 17;
/// IPv6 next-header number of ICMPv6.
pub(crate) const PROTO_ICMPV6: u8 = 58;

/// TCP flag: no more data from sender.
pub const FIN: u8 = 0x01;
/// TCP flag: synchronise sequence numbers (opens a connection).
pub const SYN: u8 = 0x02;
/// TCP flag: reset the connection.
pub const RST: u8 = 0x04;
/// TCP flag: push.
pub const PSH: u8 = 0x08;
/// TCP flag: the acknowledgment field is significant.
pub const ACK: u8 = 0x10;

/// The IPv6 minimum MTU: an ICMPv6 error must fit in it (RFC 4443 §2.4 (c)).
const IPV6_MIN_MTU: usize = 1280;
const IPV4_HEADER: usize = 20;
const IPV6_HEADER: usize = 40;
const TCP_HEADER: usize = 20;
const ICMP_HEADER: usize = 8;

/// The TCP part of a parsed segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tcp {
    /// Sequence number.
    pub(crate) seq: u32,
    /// Acknowledgment number (meaningful when `flags` has ACK).
    pub(crate) ack: u32,
    /// The flags byte (FIN, SYN, RST, PSH, ACK, ...).
    pub(crate) flags: u8,
    /// Bytes of payload after the TCP header (and options).
    pub(crate) payload_len: u32,
}

/// What the wire needs to know about an IP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Packet {
    /// Source address.
    pub(crate) src: IpAddr,
    /// Destination address.
    pub(crate) dst: IpAddr,
    /// The IPv4 protocol field, or the IPv6 next header (an extension header counts as
    /// "other").
    pub(crate) proto: u8,
    /// Source and destination port, for a TCP or UDP packet whose transport header is
    /// present (not for a non-first IPv4 fragment).
    pub(crate) ports: Option<(u16, u16)>,
    /// TCP details, for a TCP segment with a valid header.
    pub(crate) tcp: Option<Tcp>,
    /// Length of the IP header.
    pub(crate) header_len: usize,
    /// Length of the IP packet (its length field, capped by the bytes actually read).
    pub(crate) total_len: usize,
}

impl Packet {
    /// The source as a socket address (port 0 when the packet has no ports).
    pub(crate) fn src_sock(&self) -> SocketAddr {
        SocketAddr::new(self.src, self.ports.map_or(0, |p| p.0))
    }

    /// The destination as a socket address (port 0 when the packet has no ports).
    pub(crate) fn dst_sock(&self) -> SocketAddr {
        SocketAddr::new(self.dst, self.ports.map_or(0, |p| p.1))
    }

    /// The TCP flags, or 0 for anything that is not a TCP segment.
    pub(crate) fn tcp_flags(&self) -> u8 {
        self.tcp.map_or(0, |t| t.flags)
    }

    /// Whether this is a TCP segment that carries payload.
    pub(crate) fn carries_tcp_data(&self) -> bool {
        self.tcp.is_some_and(|t| t.payload_len > 0)
    }
}

fn be16(buf: &[u8], at: usize) -> Option<u16> {
    let b = buf.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

fn be32(buf: &[u8], at: usize) -> Option<u32> {
    let b = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn v4_at(buf: &[u8], at: usize) -> Option<Ipv4Addr> {
    let b: [u8; 4] = buf.get(at..at + 4)?.try_into().ok()?;
    Some(Ipv4Addr::from(b))
}

fn v6_at(buf: &[u8], at: usize) -> Option<Ipv6Addr> {
    let b: [u8; 16] = buf.get(at..at + 16)?.try_into().ok()?;
    Some(Ipv6Addr::from(b))
}

/// Parses an IP packet as read from a TUN device (no link-layer or packet-information
/// header). Returns `None` for anything that is not a well-formed IPv4 or IPv6 header.
pub(crate) fn parse(buf: &[u8]) -> Option<Packet> {
    match buf.first()? >> 4 {
        4 => parse_v4(buf),
        6 => parse_v6(buf),
        _ => None,
    }
}

fn parse_v4(buf: &[u8]) -> Option<Packet> {
    let header_len = usize::from(buf.first()? & 0x0f) * 4;
    if header_len < IPV4_HEADER || header_len > buf.len() {
        return None;
    }
    let total_len = usize::from(be16(buf, 2)?);
    if total_len < header_len {
        return None;
    }
    let total_len = total_len.min(buf.len());
    let fragment_offset = be16(buf, 6)? & 0x1fff;
    let proto = *buf.get(9)?;
    let src = IpAddr::V4(v4_at(buf, 12)?);
    let dst = IpAddr::V4(v4_at(buf, 16)?);
    let body = buf.get(header_len..total_len)?;
    let (ports, tcp) = if fragment_offset == 0 {
        transport(proto, body)
    } else {
        (None, None)
    };
    Some(Packet {
        src,
        dst,
        proto,
        ports,
        tcp,
        header_len,
        total_len,
    })
}

fn parse_v6(buf: &[u8]) -> Option<Packet> {
    if buf.len() < IPV6_HEADER {
        return None;
    }
    let payload_len = usize::from(be16(buf, 4)?);
    // A zero payload length means a jumbogram (hop-by-hop option): take what was read.
    let total_len = if payload_len == 0 {
        buf.len()
    } else {
        (IPV6_HEADER + payload_len).min(buf.len())
    };
    let proto = *buf.get(6)?;
    let src = IpAddr::V6(v6_at(buf, 8)?);
    let dst = IpAddr::V6(v6_at(buf, 24)?);
    let body = buf.get(IPV6_HEADER..total_len)?;
    let (ports, tcp) = transport(proto, body);
    Some(Packet {
        src,
        dst,
        proto,
        ports,
        tcp,
        header_len: IPV6_HEADER,
        total_len,
    })
}

/// Ports and TCP details of a transport header at the start of `body`.
fn transport(proto: u8, body: &[u8]) -> (Option<(u16, u16)>, Option<Tcp>) {
    let ports = match proto {
        PROTO_TCP | PROTO_UDP => be16(body, 0).zip(be16(body, 2)),
        _ => None,
    };
    let tcp = if proto == PROTO_TCP {
        parse_tcp(body)
    } else {
        None
    };
    (ports, tcp)
}

fn parse_tcp(seg: &[u8]) -> Option<Tcp> {
    let data_offset = usize::from(seg.get(12)? >> 4) * 4;
    if data_offset < TCP_HEADER || data_offset > seg.len() {
        return None;
    }
    Some(Tcp {
        seq: be32(seg, 4)?,
        ack: be32(seg, 8)?,
        flags: *seg.get(13)?,
        payload_len: u32::try_from(seg.len() - data_offset).ok()?,
    })
}

/// Adds `data` to a ones'-complement sum as big-endian 16-bit words (an odd last byte is
/// padded with zero).
fn sum_words(data: &[u8], mut acc: u64) -> u64 {
    let mut chunks = data.chunks_exact(2);
    for w in &mut chunks {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

/// Folds a ones'-complement sum to 16 bits and complements it: the Internet checksum.
fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// The Internet checksum (RFC 1071) of `data`.
pub(crate) fn checksum(data: &[u8]) -> u16 {
    fold(sum_words(data, 0))
}

/// The sum of the TCP/UDP/ICMPv6 pseudo-header (RFC 793 / RFC 8200 §8.1).
fn pseudo_header_sum(src: IpAddr, dst: IpAddr, proto: u8, len: usize) -> u64 {
    let mut acc = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => sum_words(&d.octets(), sum_words(&s.octets(), 0)),
        (IpAddr::V6(s), IpAddr::V6(d)) => sum_words(&d.octets(), sum_words(&s.octets(), 0)),
        // Mixed families cannot happen for packets parsed here; keep the sum harmless.
        _ => 0,
    };
    acc += u64::from(proto);
    acc += len as u64;
    acc
}

/// The checksum of a transport segment (TCP, UDP, ICMPv6) including its pseudo-header.
pub(crate) fn transport_checksum(src: IpAddr, dst: IpAddr, proto: u8, segment: &[u8]) -> u16 {
    fold(sum_words(
        segment,
        pseudo_header_sum(src, dst, proto, segment.len()),
    ))
}

/// Wraps `payload` in an IP header from `src` to `dst` (same family) with protocol /
/// next header `proto`. The IPv4 header gets its checksum and the DF bit.
fn ip_packet(src: IpAddr, dst: IpAddr, proto: u8, payload: &[u8]) -> Option<Vec<u8>> {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total = u16::try_from(IPV4_HEADER + payload.len()).ok()?;
            let mut p = Vec::with_capacity(usize::from(total));
            p.extend_from_slice(&[0x45, 0]);
            p.extend_from_slice(&total.to_be_bytes());
            p.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]);
            p.extend_from_slice(&s.octets());
            p.extend_from_slice(&d.octets());
            let sum = checksum(&p[..IPV4_HEADER]);
            p[10..12].copy_from_slice(&sum.to_be_bytes());
            p.extend_from_slice(payload);
            Some(p)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let len = u16::try_from(payload.len()).ok()?;
            let mut p = Vec::with_capacity(IPV6_HEADER + payload.len());
            p.extend_from_slice(&[0x60, 0, 0, 0]);
            p.extend_from_slice(&len.to_be_bytes());
            p.extend_from_slice(&[proto, 64]);
            p.extend_from_slice(&s.octets());
            p.extend_from_slice(&d.octets());
            p.extend_from_slice(payload);
            Some(p)
        }
        _ => None,
    }
}

/// The RST|ACK that the server side would send in answer to the client segment `p`
/// (RFC 9293 §3.10.7.1): from the segment's destination to its source, with
/// seq = the segment's ack number (0 if it had no ACK) and
/// ack = its seq + payload length (+1 for SYN, +1 for FIN).
///
/// `None` if `p` is not a TCP segment, or is itself a RST (which is never answered).
pub(crate) fn tcp_reset_for(p: &Packet) -> Option<Vec<u8>> {
    let tcp = p.tcp?;
    let (sport, dport) = p.ports?;
    if tcp.flags & RST != 0 {
        return None;
    }
    let seq = if tcp.flags & ACK != 0 { tcp.ack } else { 0 };
    let ack = tcp
        .seq
        .wrapping_add(tcp.payload_len)
        .wrapping_add(u32::from(tcp.flags & SYN != 0))
        .wrapping_add(u32::from(tcp.flags & FIN != 0));
    let mut seg = [0u8; TCP_HEADER];
    seg[0..2].copy_from_slice(&dport.to_be_bytes());
    seg[2..4].copy_from_slice(&sport.to_be_bytes());
    seg[4..8].copy_from_slice(&seq.to_be_bytes());
    seg[8..12].copy_from_slice(&ack.to_be_bytes());
    seg[12] = ((TCP_HEADER / 4) as u8) << 4;
    seg[13] = RST | ACK;
    // Window, checksum and urgent pointer stay 0 until the checksum is filled in.
    let sum = transport_checksum(p.dst, p.src, PROTO_TCP, &seg);
    seg[16..18].copy_from_slice(&sum.to_be_bytes());
    ip_packet(p.dst, p.src, PROTO_TCP, &seg)
}

/// The reason in a synthesized destination-unreachable message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unreachable {
    /// Port unreachable (ICMP code 3, ICMPv6 code 4): the kernel reports ECONNREFUSED.
    Port,
    /// Host unreachable (ICMP code 1) / address unreachable (ICMPv6 code 3): EHOSTUNREACH.
    Host,
    /// Administratively prohibited (ICMP code 13, ICMPv6 code 1): EHOSTUNREACH on IPv4,
    /// EACCES on IPv6.
    Admin,
}

impl Unreachable {
    fn icmpv4_code(self) -> u8 {
        match self {
            Self::Port => 3,
            Self::Host => 1,
            Self::Admin => 13,
        }
    }

    fn icmpv6_code(self) -> u8 {
        match self {
            Self::Port => 4,
            Self::Host => 3,
            Self::Admin => 1,
        }
    }
}

/// Whether an ICMP error may be sent about a packet between these addresses
/// (RFC 1122 §3.2.2 and RFC 4443 §2.4 (e): not about multicast, broadcast or unspecified
/// addresses).
fn may_send_error_about(src: IpAddr, dst: IpAddr) -> bool {
    let bad = |ip: IpAddr| match ip {
        IpAddr::V4(a) => a.is_multicast() || a.is_broadcast() || a.is_unspecified(),
        IpAddr::V6(a) => a.is_multicast() || a.is_unspecified(),
    };
    !bad(src) && !bad(dst)
}

/// The ICMP (IPv4) or ICMPv6 destination-unreachable message the server side would send
/// about the client packet `pkt` (parsed as `p`), from the packet's destination to its
/// source.
///
/// IPv4 quotes the original IP header and the first 8 bytes of its payload (RFC 792);
/// IPv6 quotes as much of the original packet as fits in 1280 bytes (RFC 4443).
/// `None` for ICMP/ICMPv6 packets (an error is never answered with an error) and for
/// packets to or from multicast/broadcast/unspecified addresses.
pub(crate) fn icmp_unreachable_for(pkt: &[u8], p: &Packet, why: Unreachable) -> Option<Vec<u8>> {
    if !may_send_error_about(p.src, p.dst) {
        return None;
    }
    match p.dst {
        IpAddr::V4(_) => {
            if p.proto == PROTO_ICMP {
                return None;
            }
            let quoted_len = p.total_len.min(p.header_len + 8);
            let quoted = pkt.get(..quoted_len)?;
            let mut msg = Vec::with_capacity(ICMP_HEADER + quoted.len());
            msg.extend_from_slice(&[3, why.icmpv4_code(), 0, 0, 0, 0, 0, 0]);
            msg.extend_from_slice(quoted);
            let sum = checksum(&msg);
            msg[2..4].copy_from_slice(&sum.to_be_bytes());
            ip_packet(p.dst, p.src, PROTO_ICMP, &msg)
        }
        IpAddr::V6(_) => {
            if p.proto == PROTO_ICMPV6 {
                return None;
            }
            let quoted_len = p.total_len.min(IPV6_MIN_MTU - IPV6_HEADER - ICMP_HEADER);
            let quoted = pkt.get(..quoted_len)?;
            let mut msg = Vec::with_capacity(ICMP_HEADER + quoted.len());
            msg.extend_from_slice(&[1, why.icmpv6_code(), 0, 0, 0, 0, 0, 0]);
            msg.extend_from_slice(quoted);
            let sum = transport_checksum(p.dst, p.src, PROTO_ICMPV6, &msg);
            msg[2..4].copy_from_slice(&sum.to_be_bytes());
            ip_packet(p.dst, p.src, PROTO_ICMPV6, &msg)
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A TCP segment in an IP packet, with correct checksums, for tests.
    pub(crate) fn tcp_packet(
        src: SocketAddr,
        dst: SocketAddr,
        seq: u32,
        ack: u32,
        flags: u8,
        payload: &[u8],
    ) -> Vec<u8> {
        let mut seg = vec![0u8; TCP_HEADER];
        seg[0..2].copy_from_slice(&src.port().to_be_bytes());
        seg[2..4].copy_from_slice(&dst.port().to_be_bytes());
        seg[4..8].copy_from_slice(&seq.to_be_bytes());
        seg[8..12].copy_from_slice(&ack.to_be_bytes());
        seg[12] = 5 << 4;
        seg[13] = flags;
        seg[14..16].copy_from_slice(&64240u16.to_be_bytes());
        seg.extend_from_slice(payload);
        let sum = transport_checksum(src.ip(), dst.ip(), PROTO_TCP, &seg);
        seg[16..18].copy_from_slice(&sum.to_be_bytes());
        ip_packet(src.ip(), dst.ip(), PROTO_TCP, &seg).expect("same family")
    }

    /// A UDP datagram in an IP packet, for tests.
    pub(crate) fn udp_packet(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Vec<u8> {
        let mut seg = vec![0u8; 8];
        seg[0..2].copy_from_slice(&src.port().to_be_bytes());
        seg[2..4].copy_from_slice(&dst.port().to_be_bytes());
        seg[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        seg.extend_from_slice(payload);
        let sum = transport_checksum(src.ip(), dst.ip(), PROTO_UDP, &seg);
        seg[6..8].copy_from_slice(&sum.to_be_bytes());
        ip_packet(src.ip(), dst.ip(), PROTO_UDP, &seg).expect("same family")
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().expect("socket address")
    }

    /// Checks every checksum of a packet this module produced: the IPv4 header checksum, and
    /// the transport checksum with its pseudo-header (none for ICMPv4).
    fn assert_checksums_verify(pkt: &[u8]) {
        let p = parse(pkt).expect("parses");
        let body = &pkt[p.header_len..p.total_len];
        if p.src.is_ipv4() {
            assert_eq!(checksum(&pkt[..p.header_len]), 0, "IPv4 header checksum");
        }
        let rest = match p.proto {
            PROTO_ICMP => checksum(body),
            proto => transport_checksum(p.src, p.dst, proto, body),
        };
        assert_eq!(rest, 0, "transport checksum of proto {}", p.proto);
    }

    #[test]
    fn parses_a_v4_syn() {
        let pkt = tcp_packet(
            sa("10.200.0.1:40000"),
            sa("10.201.0.10:443"),
            1000,
            0,
            SYN,
            &[],
        );
        let p = parse(&pkt).expect("parses");
        assert_eq!(p.src_sock(), sa("10.200.0.1:40000"));
        assert_eq!(p.dst_sock(), sa("10.201.0.10:443"));
        assert_eq!(p.proto, PROTO_TCP);
        assert_eq!(
            p.tcp,
            Some(Tcp {
                seq: 1000,
                ack: 0,
                flags: SYN,
                payload_len: 0
            })
        );
        assert_eq!(p.total_len, 40);
        assert_checksums_verify(&pkt);
    }

    #[test]
    fn parses_a_v6_data_segment_and_a_udp_datagram() {
        let pkt = tcp_packet(
            sa("[2001:db8:200::1]:40000"),
            sa("[2001:db8:201::a]:443"),
            7,
            9,
            ACK | PSH,
            b"hello",
        );
        let p = parse(&pkt).expect("parses");
        assert_eq!(p.dst, "2001:db8:201::a".parse::<IpAddr>().expect("ip"));
        assert!(p.carries_tcp_data());
        assert_eq!(p.tcp.map(|t| t.payload_len), Some(5));

        let udp = udp_packet(sa("10.200.0.1:5353"), sa("10.201.0.53:53"), b"q");
        let p = parse(&udp).expect("parses");
        assert_eq!(p.ports, Some((5353, 53)));
        assert_eq!(p.tcp, None);
        assert_checksums_verify(&udp);
    }

    #[test]
    fn a_non_first_v4_fragment_has_no_ports() {
        let mut pkt = udp_packet(sa("10.200.0.1:5353"), sa("10.201.0.53:53"), b"abcdefgh");
        pkt[6] = 0x00;
        pkt[7] = 0x01; // fragment offset 8 bytes
        let p = parse(&pkt).expect("parses");
        assert_eq!(p.ports, None);
    }

    #[test]
    fn rst_answers_a_syn_with_ack_of_seq_plus_one() {
        for (c, s) in [
            ("10.200.0.1:40000", "10.201.0.10:443"),
            ("[2001:db8:200::1]:40000", "[2001:db8:201::a]:443"),
        ] {
            let syn = tcp_packet(sa(c), sa(s), 0xffff_ffff, 0, SYN, &[]);
            let rst = tcp_reset_for(&parse(&syn).expect("parses")).expect("answers");
            let r = parse(&rst).expect("parses");
            assert_eq!(r.src_sock(), sa(s));
            assert_eq!(r.dst_sock(), sa(c));
            let t = r.tcp.expect("tcp");
            assert_eq!(t.flags, RST | ACK);
            assert_eq!(t.seq, 0);
            assert_eq!(t.ack, 0, "seq + 1 wraps");
            assert_checksums_verify(&rst);
        }
    }

    #[test]
    fn rst_answers_data_with_the_peer_ack_and_seq_plus_len() {
        let seg = tcp_packet(
            sa("10.200.0.1:40000"),
            sa("10.201.0.10:443"),
            500,
            9000,
            ACK | PSH | FIN,
            b"abc",
        );
        let rst = tcp_reset_for(&parse(&seg).expect("parses")).expect("answers");
        let t = parse(&rst).expect("parses").tcp.expect("tcp");
        assert_eq!((t.seq, t.ack), (9000, 504));
        assert_checksums_verify(&rst);
    }

    #[test]
    fn a_rst_is_never_answered() {
        let seg = tcp_packet(
            sa("10.200.0.1:40000"),
            sa("10.201.0.10:443"),
            1,
            2,
            RST | ACK,
            &[],
        );
        assert_eq!(tcp_reset_for(&parse(&seg).expect("parses")), None);
    }

    #[test]
    fn icmpv4_unreachable_quotes_header_and_eight_bytes() {
        let syn = tcp_packet(
            sa("10.200.0.1:40000"),
            sa("10.201.0.10:443"),
            1,
            0,
            SYN,
            b"0123456789",
        );
        let p = parse(&syn).expect("parses");
        for (why, code) in [
            (Unreachable::Port, 3),
            (Unreachable::Host, 1),
            (Unreachable::Admin, 13),
        ] {
            let icmp = icmp_unreachable_for(&syn, &p, why).expect("answers");
            let r = parse(&icmp).expect("parses");
            assert_eq!(r.proto, PROTO_ICMP);
            assert_eq!((r.src, r.dst), (p.dst, p.src));
            assert_eq!(&icmp[20..22], &[3, code]);
            assert_eq!(&icmp[28..], &syn[..28], "IP header + 8 bytes");
            assert_checksums_verify(&icmp);
        }
    }

    #[test]
    fn icmpv6_unreachable_fits_in_1280_bytes() {
        let big = vec![0x5a; 1400];
        let seg = tcp_packet(
            sa("[2001:db8:200::1]:40000"),
            sa("[2001:db8:201::a]:443"),
            1,
            1,
            ACK,
            &big,
        );
        let p = parse(&seg).expect("parses");
        for (why, code) in [
            (Unreachable::Port, 4),
            (Unreachable::Host, 3),
            (Unreachable::Admin, 1),
        ] {
            let icmp = icmp_unreachable_for(&seg, &p, why).expect("answers");
            assert_eq!(icmp.len(), 1280);
            assert_eq!(&icmp[40..42], &[1, code]);
            assert_eq!(&icmp[48..], &seg[..1232]);
            assert_checksums_verify(&icmp);
        }
        let small = tcp_packet(
            sa("[2001:db8:200::1]:40000"),
            sa("[2001:db8:201::a]:443"),
            1,
            0,
            SYN,
            &[],
        );
        let icmp = icmp_unreachable_for(&small, &parse(&small).expect("parses"), Unreachable::Host)
            .expect("answers");
        assert_eq!(&icmp[48..], &small[..]);
        assert_checksums_verify(&icmp);
    }

    #[test]
    fn no_icmp_error_about_icmp_or_multicast() {
        let syn = tcp_packet(
            sa("[2001:db8:200::1]:40000"),
            sa("[ff02::16]:443"),
            1,
            0,
            SYN,
            &[],
        );
        let p = parse(&syn).expect("parses");
        assert_eq!(icmp_unreachable_for(&syn, &p, Unreachable::Port), None);
        let icmp = icmp_unreachable_for(
            &tcp_packet(sa("10.200.0.1:1"), sa("10.201.0.10:2"), 0, 0, SYN, &[]),
            &parse(&tcp_packet(
                sa("10.200.0.1:1"),
                sa("10.201.0.10:2"),
                0,
                0,
                SYN,
                &[],
            ))
            .expect("parses"),
            Unreachable::Host,
        )
        .expect("answers");
        assert_eq!(
            icmp_unreachable_for(&icmp, &parse(&icmp).expect("parses"), Unreachable::Host),
            None
        );
    }

    #[test]
    fn truncated_and_garbled_packets_never_panic() {
        let samples = [
            tcp_packet(sa("10.200.0.1:1"), sa("10.201.0.10:2"), 1, 2, SYN, b"xyz"),
            tcp_packet(
                sa("[2001:db8:200::1]:1"),
                sa("[2001:db8:201::a]:2"),
                1,
                2,
                ACK,
                b"xy",
            ),
            udp_packet(sa("10.200.0.1:1"), sa("10.201.0.53:53"), b"q"),
        ];
        for pkt in &samples {
            for cut in 0..=pkt.len() {
                let part = &pkt[..cut];
                exercise(part);
                // Lie in the length fields and header lengths too.
                for byte in [0usize, 2, 3, 4, 5, 32, 52] {
                    let mut bent = part.to_vec();
                    if let Some(b) = bent.get_mut(byte) {
                        *b = b.wrapping_add(0x37);
                        exercise(&bent);
                    }
                }
            }
        }
    }

    /// Runs every function of the module over `pkt`; none may panic.
    pub(crate) fn exercise(pkt: &[u8]) {
        if let Some(p) = parse(pkt) {
            let _ = tcp_reset_for(&p);
            for why in [Unreachable::Port, Unreachable::Host, Unreachable::Admin] {
                let _ = icmp_unreachable_for(pkt, &p, why);
            }
            let _ = (
                p.src_sock(),
                p.dst_sock(),
                p.tcp_flags(),
                p.carries_tcp_data(),
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            exercise(&bytes);
            // Also as a v4 and a v6 packet with a plausible first byte.
            let mut v4 = bytes.clone();
            if let Some(b) = v4.first_mut() { *b = 0x45; }
            exercise(&v4);
            let mut v6 = bytes;
            if let Some(b) = v6.first_mut() { *b = 0x60; }
            exercise(&v6);
        }
    }
}
