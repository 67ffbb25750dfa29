//! Dropping a test network leaves nothing behind: no threads, no TUN descriptors, no
//! reference to its namespaces, no links or named namespaces in the host, no client
//! sockets. Also when the drop happens while unwinding from a panic.
//!
//! This file holds a single test, so that it runs alone in its process and can count the
//! process's threads and descriptors exactly.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fastfallback_testnet::{ServerKind, TestNet, or_skip, server_v4, server_v6};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the process and the host look like from outside a test network.
#[derive(Debug, PartialEq, Eq)]
struct Footprint {
    /// Names of this process's threads that the harness made ("testnet-...").
    harness_threads: Vec<String>,
    /// Open descriptors of /dev/net/tun.
    tun_fds: usize,
    /// Network namespaces referred to by this process's descriptors or threads.
    netns_refs: BTreeSet<String>,
    /// `ip netns list`.
    named_netns: String,
    /// Link names in the host namespace.
    host_links: BTreeSet<String>,
}

fn links(dir: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .map(|p| p.to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn footprint() -> Footprint {
    let mut harness_threads = Vec::new();
    let mut netns_refs: BTreeSet<String> = BTreeSet::new();
    for task in std::fs::read_dir("/proc/self/task")
        .expect("tasks")
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.starts_with("testnet-") {
            harness_threads.push(comm.trim().to_owned());
        }
        if let Ok(ns) = std::fs::read_link(task.path().join("ns/net")) {
            netns_refs.insert(ns.to_string_lossy().into_owned());
        }
    }
    let fds = links("/proc/self/fd");
    netns_refs.extend(fds.iter().filter(|l| l.starts_with("net:[")).cloned());
    let ip = |args: &[&str]| {
        let out = Command::new("ip").args(args).output().expect("run ip");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let host_links = ip(&["-o", "link"])
        .lines()
        .filter_map(|l| l.split(':').nth(1).map(|n| n.trim().to_owned()))
        .collect();
    Footprint {
        harness_threads,
        tun_fds: fds.iter().filter(|l| *l == "/dev/net/tun").count(),
        netns_refs,
        named_netns: ip(&["netns", "list"]),
        host_links,
    }
}

/// The footprint once it has settled (a joined thread may linger in /proc for an instant).
fn settled_footprint(want: &Footprint) -> Footprint {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let now = footprint();
        if &now == want || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The net namespace link ("net:[inode]") of the client and server namespaces.
fn namespaces(net: &TestNet) -> (String, String) {
    let read = || {
        std::fs::read_link("/proc/thread-self/ns/net")
            .expect("ns link")
            .to_string_lossy()
            .into_owned()
    };
    (net.client(read), net.server(read))
}

/// Builds a network, runs TLS connections through it, checks the client holds no sockets
/// afterwards, and returns it with its namespaces.
fn used_net() -> Option<(TestNet, (String, String))> {
    let net = or_skip(
        "dropping_the_net_leaves_nothing_behind",
        TestNet::builder().build(),
    )?;
    let addrs = [
        SocketAddr::from((server_v4(0), 443)),
        SocketAddr::from((server_v6(0), 443)),
    ];
    for addr in addrs {
        net.serve(
            addr,
            ServerKind::Tls {
                alpn: vec![b"h2".to_vec()],
            },
        )
        .expect("serve");
    }
    net.serve(SocketAddr::from((server_v4(1), 80)), ServerKind::Accept)
        .expect("serve");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(net.ca_der()).expect("CA");
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    net.block_on_client(async move {
        for addr in addrs {
            let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
            let name = rustls::pki_types::ServerName::try_from("origin.test").expect("name");
            let mut tls = connector.connect(name, tcp).await.expect("handshake");
            tls.write_all(b"ping").await.expect("write");
            tls.shutdown().await.expect("shutdown");
            let mut rest = Vec::new();
            let _ = tls.read_to_end(&mut rest).await;
        }
        // A connection the server holds open, and a UDP socket: the runtime's drop closes
        // both.
        let _held = tokio::net::TcpStream::connect((server_v4(1), 80))
            .await
            .expect("connect");
        let _udp = tokio::net::UdpSocket::bind("0.0.0.0:0").await.expect("udp");
    });
    let left = net.client_sockets().expect("client sockets");
    assert!(
        left.is_empty(),
        "the client still holds sockets:\n{}",
        left.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let ns = namespaces(&net);
    assert_ne!(ns.0, ns.1);
    Some((net, ns))
}

#[test]
fn dropping_the_net_leaves_nothing_behind() {
    let before = footprint();
    assert_eq!(before.tun_fds, 0);

    // A plain drop.
    let Some((net, (client_ns, server_ns))) = used_net() else {
        return;
    };
    let during = footprint();
    assert_eq!(during.tun_fds, 2, "one TUN device per side");
    assert!(during.harness_threads.contains(&"testnet-wire".to_owned()));
    assert!(during.netns_refs.contains(&client_ns));
    assert!(during.netns_refs.contains(&server_ns));
    let start = Instant::now();
    drop(net);
    eprintln!("drop took {:?}", start.elapsed());
    let after = settled_footprint(&before);
    assert_eq!(after, before);
    assert!(!after.netns_refs.contains(&client_ns) && !after.netns_refs.contains(&server_ns));

    // A drop while unwinding from a panic (its message silenced: it is expected).
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let unwound = std::panic::catch_unwind(|| {
        let (_net, _) = used_net().expect("made a net before");
        panic!("a failing test");
    });
    std::panic::set_hook(hook);
    assert!(unwound.is_err());
    assert_eq!(settled_footprint(&before), before);
}
