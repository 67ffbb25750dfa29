//! Trusting a private CA from PEM: [`ConnectorBuilder::add_root_pem`] and
//! [`ConnectorBuilder::add_root_pem_file`].

use std::path::Path;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::builder::{ConnectorBuilder, Roots};
use super::error::BuildError;

impl ConnectorBuilder {
    /// Also trusts the CA certificates in `pem` (one or more `BEGIN CERTIFICATE` sections;
    /// other sections, such as keys, are skipped), on top of the webpki roots, or of the
    /// roots given to [`Self::root_certificates`]. Call it once per CA bundle.
    ///
    /// Fails when `pem` holds no certificate, a section is malformed, or a certificate
    /// cannot be a trust anchor. With `platform_verifier` (a feature) it fails too: the
    /// operating system's verifier takes no extra roots here (add the CA to the system's
    /// store instead).
    ///
    /// ```
    /// use fastfallback_net::Connector;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let ca_pem = {
    /// #     let key = rcgen::KeyPair::generate()?;
    /// #     let mut ca = rcgen::CertificateParams::new(Vec::<String>::new())?;
    /// #     ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    /// #     ca.self_signed(&key)?.pem()
    /// # };
    /// // `ca_pem` holds "-----BEGIN CERTIFICATE-----\n…", as read from a file.
    /// let connector = Connector::builder().add_root_pem(ca_pem.as_bytes())?.build()?;
    /// # drop(connector);
    /// assert!(Connector::builder().add_root_pem(b"not a certificate").is_err());
    /// # Ok(()) }
    /// ```
    pub fn add_root_pem(mut self, pem: &[u8]) -> Result<Self, BuildError> {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| pem_error(format!("{e}")))?;
        self.add_roots(certs)?;
        Ok(self)
    }

    /// [`Self::add_root_pem`] with the contents of the file at `path` (a CA bundle such as
    /// `/etc/ssl/certs/my-ca.pem`). A file that cannot be read is an error.
    pub fn add_root_pem_file(self, path: impl AsRef<Path>) -> Result<Self, BuildError> {
        let path = path.as_ref();
        let pem = std::fs::read(path)
            .map_err(|e| pem_error(format!("cannot read {}: {e}", path.display())))?;
        self.add_root_pem(&pem)
    }

    fn add_roots(&mut self, certs: Vec<CertificateDer<'static>>) -> Result<(), BuildError> {
        if certs.is_empty() {
            return Err(pem_error("no certificate in the PEM input".to_owned()));
        }
        if matches!(self.roots, Roots::Webpki) {
            let webpki = webpki_roots::TLS_SERVER_ROOTS.iter().cloned().collect();
            self.roots = Roots::Custom(webpki);
        }
        let Roots::Custom(roots) = &mut self.roots else {
            // The platform verifier: it reads the system's store, and takes nothing else.
            return Err(pem_error(
                "the platform verifier takes no extra roots; add the CA to the system's store"
                    .to_owned(),
            ));
        };
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| pem_error(format!("a certificate is not a usable CA: {e}")))?;
        }
        Ok(())
    }
}

fn pem_error(what: String) -> BuildError {
    BuildError::Tls(rustls::Error::General(format!("root certificates: {what}")))
}

#[cfg(all(test, feature = "platform-verifier"))]
mod tests {
    use crate::{BuildError, Connector};

    #[test]
    fn the_platform_verifier_refuses_extra_roots_instead_of_ignoring_them() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let pem = ca.self_signed(&key).unwrap().pem();
        let result = Connector::builder()
            .platform_verifier()
            .add_root_pem(pem.as_bytes());
        let Err(BuildError::Tls(e)) = result else {
            panic!("extra roots were accepted beside the platform verifier");
        };
        assert!(e.to_string().contains("platform verifier"), "{e}");
        // Without it, the same PEM is taken.
        assert!(Connector::builder().add_root_pem(pem.as_bytes()).is_ok());
    }
}
