//! A TLS session store that tells when a ticket arrives ([`Tickets`]), so a test that needs
//! a ticket (to resume, to send 0-RTT) waits for it rather than for a round trip that
//! usually comes after it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rustls::client::{ClientSessionMemoryCache, ClientSessionStore, Tls12ClientSessionValue};
use rustls::client::{Resumption, Tls13ClientSessionValue};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, NamedGroup, RootCertStore};
use tokio::sync::Notify;

/// rustls's in-memory session store, counting the TLS 1.3 tickets it is given.
#[derive(Debug)]
pub struct Tickets {
    store: ClientSessionMemoryCache,
    received: AtomicUsize,
    arrived: Notify,
}

impl Tickets {
    /// An empty store.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            store: ClientSessionMemoryCache::new(64),
            received: AtomicUsize::new(0),
            arrived: Notify::new(),
        })
    }

    /// A client configuration trusting `roots` whose sessions go to this store.
    pub fn client_config(self: &Arc<Self>, roots: RootCertStore) -> ClientConfig {
        let mut config = ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.resumption = Resumption::store(Arc::clone(self) as Arc<dyn ClientSessionStore>);
        config
    }

    /// Waits until `n` TLS 1.3 tickets have been received in all.
    pub async fn received(&self, n: usize) {
        loop {
            let arrived = self.arrived.notified();
            if self.received.load(Ordering::SeqCst) >= n {
                return;
            }
            arrived.await;
        }
    }
}

impl ClientSessionStore for Tickets {
    fn set_kx_hint(&self, name: ServerName<'static>, group: NamedGroup) {
        self.store.set_kx_hint(name, group);
    }

    fn kx_hint(&self, name: &ServerName<'_>) -> Option<NamedGroup> {
        self.store.kx_hint(name)
    }

    fn set_tls12_session(&self, name: ServerName<'static>, value: Tls12ClientSessionValue) {
        self.store.set_tls12_session(name, value);
    }

    fn tls12_session(&self, name: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
        self.store.tls12_session(name)
    }

    fn remove_tls12_session(&self, name: &ServerName<'static>) {
        self.store.remove_tls12_session(name);
    }

    fn insert_tls13_ticket(&self, name: ServerName<'static>, value: Tls13ClientSessionValue) {
        self.store.insert_tls13_ticket(name, value);
        self.received.fetch_add(1, Ordering::SeqCst);
        self.arrived.notify_waiters();
    }

    fn take_tls13_ticket(&self, name: &ServerName<'static>) -> Option<Tls13ClientSessionValue> {
        self.store.take_tls13_ticket(name)
    }
}
