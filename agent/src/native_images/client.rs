//! Talking to a registry: an `oci-client` client made for one source (its
//! certificates, its platform), the source's credentials, references, and
//! the one line an error becomes.

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig};
use oci_client::errors::OciDistributionError;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use super::source::{Platform, Source};

/// The registry of an image source: client, credentials and repository.
pub struct Remote {
    /// The client, trusting the source's certificates.
    pub client: Client,
    /// The source's credentials (anonymous when none).
    pub auth: RegistryAuth,
    /// `host[:port]/path`, as the source names it (for messages).
    pub repository: String,
    /// The repository as a reference (tag `latest`; see [`Remote::tagged`]).
    base: Reference,
}

/// Installs rustls's provider once (the client is built without one, to
/// use ring as the rest of Gantry does).
fn install_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

impl Remote {
    /// A client for `source` (or its mirror when `mirror` is true and the
    /// image is on Docker Hub; `None` then when there is no mirror to use).
    pub fn new(source: &Source, mirror: bool) -> Result<Option<Self>, String> {
        install_provider();
        let base: Reference = source.repository.parse().map_err(|e| {
            format!(
                "repository {:?} is not an image repository: {e}",
                source.repository
            )
        })?;
        let (base, credentials) = if mirror {
            let Some(m) = &source.mirror else {
                return Ok(None);
            };
            if base.registry() != "docker.io" {
                return Ok(None);
            }
            let mirrored = Reference::with_tag(
                m.host.clone(),
                base.repository().to_string(),
                "latest".into(),
            );
            (mirrored, m.credentials.clone())
        } else {
            (base, source.credentials.clone())
        };
        let platform = source.platform();
        let config = ClientConfig {
            extra_root_certificates: source
                .ca_certs
                .iter()
                .map(|pem| Certificate {
                    encoding: CertificateEncoding::Pem,
                    data: pem.as_bytes().to_vec(),
                })
                .collect(),
            platform_resolver: Some(Box::new(move |entries| pick(&platform, entries))),
            connect_timeout: Some(std::time::Duration::from_secs(15)),
            read_timeout: Some(std::time::Duration::from_secs(120)),
            ..ClientConfig::default()
        };
        let auth = match credentials {
            Some((user, pass)) => RegistryAuth::Basic(user, pass),
            None => RegistryAuth::Anonymous,
        };
        Ok(Some(Remote {
            client: Client::new(config),
            auth,
            repository: source.repository.clone(),
            base,
        }))
    }

    /// The image tagged `tag`.
    pub fn tagged(&self, tag: &str) -> Reference {
        Reference::with_tag(
            self.base.registry().to_string(),
            self.base.repository().to_string(),
            tag.to_string(),
        )
    }

    /// The image with digest `digest`.
    pub fn at(&self, digest: &str) -> Reference {
        Reference::with_digest(
            self.base.registry().to_string(),
            self.base.repository().to_string(),
            digest.to_string(),
        )
    }

    /// One line saying why `what` failed, naming the cause an operator can
    /// act on: credentials refused, an unknown tag or digest, a certificate
    /// not trusted, a registry not reached.
    pub fn explain(&self, what: &str, e: &OciDistributionError) -> String {
        let chain = error_chain(e);
        let lower = chain.to_lowercase();
        let repo = &self.repository;
        let cause = match e {
            OciDistributionError::AuthenticationFailure(_)
            | OciDistributionError::UnauthorizedError { .. } => {
                format!("the registry refused the credentials for {repo} (401 unauthorized)")
            }
            OciDistributionError::ServerError { code: 401, .. } => {
                format!("the registry refused the credentials for {repo} (401 unauthorized)")
            }
            OciDistributionError::ImageManifestNotFoundError(_)
            | OciDistributionError::ServerError { code: 404, .. } => {
                format!("{what}: not found in {repo}")
            }
            OciDistributionError::RegistryError { envelope, .. }
                if envelope
                    .errors
                    .iter()
                    .any(|x| format!("{:?}", x.code).to_lowercase().contains("unknown")) =>
            {
                format!("{what}: not found in {repo}")
            }
            OciDistributionError::RegistryError { envelope, .. }
                if envelope.errors.iter().any(|x| {
                    format!("{:?}", x.code)
                        .to_lowercase()
                        .contains("unauthorized")
                }) =>
            {
                format!("the registry refused the credentials for {repo} (401 unauthorized)")
            }
            _ if lower.contains("certificate") || lower.contains("unknownissuer") => format!(
                "the TLS certificate of {}'s registry is not trusted (give its CA in source.ca_certs): {chain}",
                repo
            ),
            _ if lower.contains("connect") || lower.contains("dns") => {
                format!("the registry of {repo} cannot be reached: {chain}")
            }
            _ => format!("{what} from {repo}: {chain}"),
        };
        cause
    }
}

/// An error with its sources, on one line.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let text = s.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        next = s.source();
    }
    line.replace('\n', " ")
}

/// The manifest of `platform` in an index.
fn pick(platform: &Platform, entries: &[oci_client::manifest::ImageIndexEntry]) -> Option<String> {
    entries
        .iter()
        .find(|entry| {
            entry.platform.as_ref().is_some_and(|p| {
                p.os.to_string() == platform.os
                    && p.architecture.to_string() == platform.architecture
            })
        })
        .map(|entry| entry.digest.clone())
}
