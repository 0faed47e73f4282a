//! Signed stream URLs: how one worker's agent lets another worker pull a
//! volume straight from it, without the web node relaying the bytes.
//!
//! The web node signs a [`StreamGrant`] (one path of one volume on one
//! worker, in one encoding, until a time) with the SOURCE worker's stream
//! key, which that worker generated at start and sent in its registration.
//! The destination agent GETs the URL; the source agent checks the grant
//! against its own key before streaming. The signature is an HMAC-SHA256
//! over a canonical encoding in which every field is length-prefixed, so no
//! two different grants encode to the same bytes.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use thiserror::Error;

use crate::spec::Encoding;

/// HMAC-SHA256.
type HmacSha256 = Hmac<Sha256>;

/// The `path` of a grant for an image volume's blobs ([`StreamGrant::blob_url`]).
pub const BLOBS_PATH: &str = "@blobs";

/// What a signed stream URL grants: one path of one volume on one worker,
/// in one encoding, until a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamGrant {
    /// Name of the worker holding the volume (the source).
    pub worker: String,
    /// Handle of the volume.
    pub volume: String,
    /// Path inside the volume (as the agent's `stream-out` takes it).
    pub path: String,
    /// Encoding of the tar stream.
    pub encoding: Encoding,
    /// Unix time (ms) after which the grant is refused.
    pub expires_ms: i64,
}

/// Why a stream URL is refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StreamUrlError {
    /// The signature does not match the grant under this key.
    #[error("the stream URL's signature does not match")]
    Forged,
    /// The grant's time is over.
    #[error("the stream URL expired at {at_ms} (unix ms)")]
    Expired {
        /// When it expired (unix ms).
        at_ms: i64,
    },
}

impl StreamGrant {
    /// The bytes the signature covers: a version tag, then every field as
    /// `<decimal length>:<bytes>` — unambiguous whatever the fields hold.
    fn canonical(&self) -> Vec<u8> {
        let expires = self.expires_ms.to_string();
        let fields: [&str; 5] = [
            &self.worker,
            &self.volume,
            &self.path,
            self.encoding.as_str(),
            &expires,
        ];
        let mut out = b"gantry-stream-grant-v1\n".to_vec();
        for f in fields {
            out.extend_from_slice(f.len().to_string().as_bytes());
            out.push(b':');
            out.extend_from_slice(f.as_bytes());
        }
        out
    }

    /// The MAC over the grant, keyed with `key`.
    fn mac(&self, key: &str) -> HmacSha256 {
        let mut mac =
            HmacSha256::new_from_slice(key.as_bytes()).expect("HMAC takes keys of any length");
        mac.update(&self.canonical());
        mac
    }

    /// The URL of one blob of an image volume on the source agent, with
    /// `{digest}` left for the puller to fill:
    /// `{agent_url}/p2p/volumes/{volume}/blobs/{digest}?worker=..&path=..&encoding=..&expires=..&sig=..`.
    /// The grant's `path` is [`BLOBS_PATH`]: it lets the holder of the URL
    /// fetch the blobs of that one image and nothing else.
    pub fn blob_url(&self, agent_url: &str, key: &str) -> String {
        self.url_of(agent_url, "blobs/{digest}", key)
    }

    /// `{agent_url}/p2p/volumes/{volume}/{route}?` and the signed query.
    fn url_of(&self, agent_url: &str, route: &str, key: &str) -> String {
        format!(
            "{}/p2p/volumes/{}/{route}?worker={}&path={}&encoding={}&expires={}&sig={}",
            agent_url.trim_end_matches('/'),
            escape(&self.volume),
            escape(&self.worker),
            escape(&self.path),
            self.encoding.as_str(),
            self.expires_ms,
            self.sign(key)
        )
    }

    /// Hex HMAC-SHA256 with `key` over a canonical, unambiguous encoding of
    /// every field.
    pub fn sign(&self, key: &str) -> String {
        hex(&self.mac(key).finalize().into_bytes())
    }

    /// The full URL on the source agent:
    /// `{agent_url}/p2p/volumes/{volume}/stream-out?worker=..&path=..&encoding=..&expires=..&sig=..`
    /// (path segment and query values percent-escaped).
    pub fn url(&self, agent_url: &str, key: &str) -> String {
        self.url_of(agent_url, "stream-out", key)
    }

    /// Checks `sig` in constant time (a signature that is not 64 hex digits
    /// is [`StreamUrlError::Forged`] too); then [`StreamUrlError::Expired`]
    /// when `now_ms > expires_ms`.
    pub fn verify(&self, key: &str, sig: &str, now_ms: i64) -> Result<(), StreamUrlError> {
        let given = unhex(sig).ok_or(StreamUrlError::Forged)?;
        self.mac(key)
            .verify_slice(&given)
            .map_err(|_| StreamUrlError::Forged)?;
        if now_ms > self.expires_ms {
            return Err(StreamUrlError::Expired {
                at_ms: self.expires_ms,
            });
        }
        Ok(())
    }
}

/// Lowercase hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Decodes hex (either case); `None` for anything else.
fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.as_bytes()
        .chunks(2)
        .map(|pair| {
            let digit = |c: u8| (c as char).to_digit(16);
            Some((digit(pair[0])? * 16 + digit(pair[1])?) as u8)
        })
        .collect()
}

/// The URL of one layer of an image volume as its holder keeps it
/// decompressed (the layer's tar named by its diff id, zstd-encoded), made
/// from a [`StreamGrant::blob_url`]: the same grant, route `diffs/{digest}`
/// with `{digest}` left for the diff id. None for a URL that is not a blob
/// URL.
pub fn diff_url_of(blob_url: &str) -> Option<String> {
    let (head, query) = blob_url.split_once("/blobs/{digest}?")?;
    Some(format!("{head}/diffs/{{digest}}?{query}"))
}

/// Percent-encodes `s` for use as one URL path segment or query value:
/// every byte but RFC 3986's unreserved characters (`A-Z a-z 0-9 - _ . ~`)
/// becomes `%XX`, so a `/`, `?`, `#`, `&` or space cannot change the URL's
/// structure.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "0123456789abcdef-the-source-workers-key";

    #[test]
    fn a_diff_url_is_a_blob_url_under_the_same_grant_on_the_diffs_route() {
        let grant = StreamGrant {
            worker: "w".into(),
            volume: "v 1".into(),
            path: BLOBS_PATH.into(),
            encoding: Encoding::Raw,
            expires_ms: 5,
        };
        let blob = grant.blob_url("http://a:1/", KEY);
        let diff = diff_url_of(&blob).unwrap();
        assert_eq!(diff, blob.replace("/blobs/{digest}?", "/diffs/{digest}?"));
        assert!(diff.starts_with("http://a:1/p2p/volumes/v%201/diffs/{digest}?worker=w&"));
        assert_eq!(diff_url_of(&grant.url("http://a:1", KEY)), None);
    }

    fn grant() -> StreamGrant {
        StreamGrant {
            worker: "worker-a".into(),
            volume: "vol-1".into(),
            path: "out/dir".into(),
            encoding: Encoding::Zstd,
            expires_ms: 1_000_000,
        }
    }

    #[test]
    fn a_signed_grant_verifies_until_it_expires() {
        let sig = grant().sign(KEY);
        assert_eq!(sig.len(), 64);
        assert_eq!(sig, grant().sign(KEY), "signing is deterministic");
        assert_eq!(grant().verify(KEY, &sig, 999_999), Ok(()));
        assert_eq!(grant().verify(KEY, &sig, 1_000_000), Ok(()));
        assert_eq!(
            grant().verify(KEY, &sig.to_uppercase(), 0),
            Ok(()),
            "hex of either case"
        );
        assert_eq!(
            grant().verify(KEY, &sig, 1_000_001),
            Err(StreamUrlError::Expired { at_ms: 1_000_000 })
        );
    }

    #[test]
    fn altering_any_field_or_the_key_forges_the_signature() {
        let sig = grant().sign(KEY);
        let altered: Vec<(&str, StreamGrant)> = vec![
            (
                "worker",
                StreamGrant {
                    worker: "worker-b".into(),
                    ..grant()
                },
            ),
            (
                "volume",
                StreamGrant {
                    volume: "vol-2".into(),
                    ..grant()
                },
            ),
            (
                "path",
                StreamGrant {
                    path: "out".into(),
                    ..grant()
                },
            ),
            (
                "encoding",
                StreamGrant {
                    encoding: Encoding::Raw,
                    ..grant()
                },
            ),
            (
                "expires",
                StreamGrant {
                    expires_ms: 9_000_000,
                    ..grant()
                },
            ),
        ];
        for (field, g) in altered {
            assert_eq!(
                g.verify(KEY, &sig, 0),
                Err(StreamUrlError::Forged),
                "{field}"
            );
        }
        assert_eq!(
            grant().verify("another key", &sig, 0),
            Err(StreamUrlError::Forged)
        );
        for bad in ["", "zz", &sig[..62], &format!("{sig}00")] {
            assert_eq!(grant().verify(KEY, bad, 0), Err(StreamUrlError::Forged));
        }
    }

    #[test]
    fn moving_bytes_between_fields_changes_the_signature() {
        let a = StreamGrant {
            volume: "ab".into(),
            path: "c".into(),
            ..grant()
        };
        let b = StreamGrant {
            volume: "a".into(),
            path: "bc".into(),
            ..grant()
        };
        assert_ne!(a.sign(KEY), b.sign(KEY));
    }

    #[test]
    fn the_url_escapes_every_value_and_carries_the_signature() {
        let g = StreamGrant {
            path: "a b/&c=d".into(),
            ..grant()
        };
        let url = g.url("http://127.0.0.1:7788/", KEY);
        assert_eq!(
            url,
            format!(
                "http://127.0.0.1:7788/p2p/volumes/vol-1/stream-out?worker=worker-a\
                 &path=a%20b%2F%26c%3Dd&encoding=zstd&expires=1000000&sig={}",
                g.sign(KEY)
            )
        );
    }
}
