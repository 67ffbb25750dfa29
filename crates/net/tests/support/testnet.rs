//! Shared by the test-network tests: a connector set up for a test network.

use fastfallback_net::{ConnectorBuilder, HickoryResolver};
use fastfallback_testnet::TestNet;
use hickory_resolver::config::ResolverOpts;

/// A connector builder that asks the network's DNS server, with no resolver cache (each
/// contact sends its queries), and trusts the network's CA only.
pub(crate) fn builder(net: &TestNet) -> ConnectorBuilder {
    let mut opts = ResolverOpts::default();
    opts.cache_size = 0;
    let resolver = HickoryResolver::with_name_server_opts(net.dns_server(), opts).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(net.ca_der()).unwrap();
    fastfallback_net::Connector::builder()
        .resolver(resolver)
        .root_certificates(roots)
}
