//! Secrets at rest: the [`Sealer`] encrypts every secret the database
//! stores (a worker's agent token and stream key today; credentials
//! tomorrow) with one key kept outside the database, so that a copy of the
//! database alone (a dump, a backup, a reader of its files) hands over no
//! secret that works.
//!
//! The cipher is AES-256-GCM (an AEAD: it encrypts and authenticates)
//! from `ring`, already in the tree through rustls: a well-kept, audited
//! implementation, no new crate. Its key is derived from the node's key
//! with HKDF-SHA256 (so the one key file serves each cipher with its own
//! key). Each seal draws a fresh random 96-bit nonce from the system's
//! generator (far below GCM's bound of 2^32 random nonces per key for the
//! secrets a CI database holds), and binds the ciphertext to where it is
//! stored (its *context*, e.g. `workers/w1/agent_token`, as associated
//! data), so a sealed value moved to another row or column does not open.
//!
//! A sealed value is text: `sealed:v2:` then base64 (no padding) of the
//! nonce followed by the ciphertext and its tag. Values earlier versions
//! sealed, `sealed:v1:` (ChaCha20-Poly1305 under the key itself), still
//! open; a node starting on a database holding them seals them again as
//! `v2` (as a key rotation does).

use std::path::Path;

use base64::Engine as _;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

/// What every sealed value starts with, whatever its format's version
/// (a `LIKE` pattern's prefix).
pub(crate) const SEALED_PREFIX: &str = "sealed:v";

/// The prefix of values sealed by this version: AES-256-GCM.
const V2: &str = "sealed:v2:";

/// The prefix of values earlier versions sealed: ChaCha20-Poly1305.
pub(crate) const V1: &str = "sealed:v1:";

/// HKDF's `info` deriving the AES-256-GCM key from the node's key.
const AES_KEY_INFO: &[u8] = b"gantry sealer v2 aes-256-gcm";

/// The key's length in bytes (256 bits).
pub(crate) const KEY_LEN: usize = 32;

/// Why a value could not be sealed or opened, or a key not loaded.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// The value is not in the sealed format.
    #[error("{context}: not a sealed value")]
    NotSealed {
        /// Where the value was stored.
        context: String,
    },
    /// The key does not open it (another key sealed it, or it was altered).
    #[error("{context}: the encryption key does not open this value (sealed with another key, or altered)")]
    WrongKey {
        /// Where the value was stored.
        context: String,
    },
    /// The key file is unreadable, malformed or cannot be written.
    #[error("encryption key file {path}: {reason}")]
    KeyFile {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

/// Seals and opens stored secrets with one 256-bit key.
#[derive(Clone)]
pub struct Sealer {
    /// The AES-256-GCM key (derived), sealing and opening `v2` values.
    key: std::sync::Arc<LessSafeKey>,
    /// The ChaCha20-Poly1305 key (the node's key itself), opening the `v1`
    /// values earlier versions sealed.
    v1: std::sync::Arc<LessSafeKey>,
    /// Where the key came from, for messages (`a random key` in tests).
    origin: std::sync::Arc<str>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Sealer")
            .field("origin", &self.origin)
            .finish()
    }
}

impl Sealer {
    /// A sealer of `key`; `origin` names where it came from in messages.
    pub fn from_key(key: &[u8; KEY_LEN], origin: &str) -> Sealer {
        let v1 = UnboundKey::new(&CHACHA20_POLY1305, key).expect("a 32-byte key");
        let mut aes = [0u8; KEY_LEN];
        ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, &[])
            .extract(key)
            .expand(&[AES_KEY_INFO], ring::hkdf::HKDF_SHA256)
            .and_then(|okm| okm.fill(&mut aes))
            .expect("HKDF-SHA256 gives 32 bytes");
        let v2 = UnboundKey::new(&AES_256_GCM, &aes).expect("a 32-byte key");
        Sealer {
            key: std::sync::Arc::new(LessSafeKey::new(v2)),
            v1: std::sync::Arc::new(LessSafeKey::new(v1)),
            origin: std::sync::Arc::from(origin),
        }
    }

    /// A sealer of a new random key that lives as long as the process
    /// (tests, and a database no secret outlives).
    pub fn ephemeral() -> Sealer {
        let mut key = [0u8; KEY_LEN];
        SystemRandom::new()
            .fill(&mut key)
            .expect("the system's random generator");
        Sealer::from_key(&key, "a random key of this process")
    }

    /// Where the key came from (a file's path), for messages.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The sealer of the key in file `path` (64 hex digits), made with a
    /// new random key (mode 0600, written whole or not at all) when the
    /// file does not exist. Several processes making it at once agree on
    /// one key: the file is linked into place only if absent, and the
    /// loser reads the winner's.
    pub fn load_or_create(path: &Path) -> Result<Sealer, SealError> {
        let err = |reason: String| SealError::KeyFile {
            path: path.display().to_string(),
            reason,
        };
        match std::fs::read_to_string(path) {
            Ok(text) => return Self::parse(&text, path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(e.to_string())),
        }
        let mut key = [0u8; KEY_LEN];
        SystemRandom::new()
            .fill(&mut key)
            .map_err(|_| err("the system's random generator failed".into()))?;
        let hex = hex::encode(key);
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| err(format!("creating its directory: {e}")))?;
        let tmp = dir.join(format!(
            ".{}.{}.tmp",
            path.file_name()
                .map_or("key".into(), |n| n.to_string_lossy()),
            uuid::Uuid::new_v4().simple()
        ));
        {
            use std::io::Write as _;
            use std::os::unix::fs::OpenOptionsExt as _;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(|e| err(format!("writing {}: {e}", tmp.display())))?;
            f.write_all(format!("{hex}\n").as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(|e| err(format!("writing {}: {e}", tmp.display())))?;
        }
        // A hard link fails when the name exists: whoever links first wins.
        let linked = std::fs::hard_link(&tmp, path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => {
                tracing::info!(file = %path.display(), "made a new key to seal stored secrets with: keep it (and back it up) apart from the database");
                Ok(Sealer::from_key(&key, &path.display().to_string()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
                Self::parse(&text, path)
            }
            Err(e) => Err(err(e.to_string())),
        }
    }

    /// The sealer of the key in file `path`, which must exist (a key a
    /// database was sealed with: `old_encryption_key_file`).
    pub fn load(path: &Path) -> Result<Sealer, SealError> {
        let text = std::fs::read_to_string(path).map_err(|e| SealError::KeyFile {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Self::parse(&text, path)
    }

    /// Reads a key file's text: 64 hex digits (white space around them
    /// is ignored).
    fn parse(text: &str, path: &Path) -> Result<Sealer, SealError> {
        let hex = text.trim();
        let bad = || SealError::KeyFile {
            path: path.display().to_string(),
            reason: format!(
                "expected {} hex digits (a 256-bit key), found {} characters",
                KEY_LEN * 2,
                hex.len()
            ),
        };
        if hex.len() != KEY_LEN * 2 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut key = [0u8; KEY_LEN];
        for (i, byte) in key.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Sealer::from_key(&key, &path.display().to_string()))
    }

    /// Seals `plain`, bound to `context` (where it is stored).
    pub fn seal(&self, context: &str, plain: &str) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .expect("the system's random generator");
        let mut data = plain.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(context.as_bytes()),
                &mut data,
            )
            .expect("sealing fits in memory");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&data);
        format!(
            "{V2}{}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(out)
        )
    }

    /// Opens a value [`Sealer::seal`] made for the same `context`.
    pub fn open(&self, context: &str, sealed: &str) -> Result<String, SealError> {
        let not_sealed = || SealError::NotSealed {
            context: context.to_string(),
        };
        let (key, body) = match (sealed.strip_prefix(V2), sealed.strip_prefix(V1)) {
            (Some(body), _) => (&self.key, body),
            (None, Some(body)) => (&self.v1, body),
            (None, None) => return Err(not_sealed()),
        };
        let mut data = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(body)
            .map_err(|_| not_sealed())?;
        if data.len() < NONCE_LEN {
            return Err(not_sealed());
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&data[..NONCE_LEN]);
        let cipher = &mut data[NONCE_LEN..];
        let plain = key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(context.as_bytes()),
                cipher,
            )
            .map_err(|_| SealError::WrongKey {
                context: context.to_string(),
            })?;
        String::from_utf8(plain.to_vec()).map_err(|_| SealError::WrongKey {
            context: context.to_string(),
        })
    }

    /// Whether `value` is in the sealed format (a value stored before
    /// sealing began is not).
    pub fn is_sealed(value: &str) -> bool {
        value.starts_with(V2) || value.starts_with(V1)
    }

    /// Whether `value` was sealed by an earlier version (`v1`), to be
    /// sealed again.
    pub(crate) fn is_v1(value: &str) -> bool {
        value.starts_with(V1)
    }

    /// Seals `plain` as earlier versions did (`v1`, ChaCha20-Poly1305),
    /// for the tests of their upgrade.
    #[cfg(test)]
    pub(crate) fn seal_v1(&self, context: &str, plain: &str) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new().fill(&mut nonce).unwrap();
        let mut data = plain.as_bytes().to_vec();
        self.v1
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(context.as_bytes()),
                &mut data,
            )
            .unwrap();
        let mut out = nonce.to_vec();
        out.extend_from_slice(&data);
        format!(
            "{V1}{}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(out)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_opens_with_its_key_and_context_only() {
        let s = Sealer::ephemeral();
        let sealed = s.seal("workers/w1/agent_token", "t0ken");
        assert!(Sealer::is_sealed(&sealed));
        assert!(!sealed.contains("t0ken"));
        assert_eq!(s.open("workers/w1/agent_token", &sealed).unwrap(), "t0ken");
        // Fresh nonces: the same secret seals differently each time.
        assert_ne!(sealed, s.seal("workers/w1/agent_token", "t0ken"));
        // Moved to another row, or opened with another key: refused.
        assert!(matches!(
            s.open("workers/w2/agent_token", &sealed),
            Err(SealError::WrongKey { .. })
        ));
        assert!(matches!(
            Sealer::ephemeral().open("workers/w1/agent_token", &sealed),
            Err(SealError::WrongKey { .. })
        ));
        let mut altered = sealed.clone();
        altered.pop();
        assert!(s.open("workers/w1/agent_token", &altered).is_err());
        assert!(matches!(
            s.open("x", "plain"),
            Err(SealError::NotSealed { .. })
        ));
    }

    #[test]
    fn values_are_sealed_with_aes_gcm_and_earlier_chacha_values_still_open() {
        let key = [7u8; KEY_LEN];
        let s = Sealer::from_key(&key, "k");
        let sealed = s.seal("c", "secret-value");
        assert!(sealed.starts_with("sealed:v2:"), "{sealed}");
        // The v2 body is AES-256-GCM under the HKDF-derived key: opened
        // here with ring directly, not through the Sealer.
        let raw = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(&sealed["sealed:v2:".len()..])
            .unwrap();
        let mut aes = [0u8; KEY_LEN];
        ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, &[])
            .extract(&key)
            .expand(&[b"gantry sealer v2 aes-256-gcm"], ring::hkdf::HKDF_SHA256)
            .unwrap()
            .fill(&mut aes)
            .unwrap();
        let k = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &aes).unwrap());
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&raw[..NONCE_LEN]);
        let mut body = raw[NONCE_LEN..].to_vec();
        let plain = k
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(b"c"),
                &mut body,
            )
            .unwrap();
        assert_eq!(plain, b"secret-value");
        // An earlier version's value opens, and is told apart.
        let old = s.seal_v1("c", "older");
        assert!(Sealer::is_sealed(&old) && Sealer::is_v1(&old));
        assert!(!Sealer::is_v1(&sealed));
        assert_eq!(s.open("c", &old).unwrap(), "older");
        assert!(s.open("d", &old).is_err());
    }

    #[test]
    fn a_key_file_is_made_private_once_and_then_kept() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("secret.key");
        let a = Sealer::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let b = Sealer::load_or_create(&path).unwrap();
        assert_eq!(b.open("c", &a.seal("c", "x")).unwrap(), "x");
        // Nothing but the key is left in its directory.
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("secret.key")]);
        std::fs::write(&path, "not a key").unwrap();
        let e = Sealer::load_or_create(&path).unwrap_err().to_string();
        assert!(e.contains("64 hex digits"), "{e}");
    }

    #[test]
    fn processes_making_the_key_at_once_agree_on_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret.key");
        let sealers: Vec<Sealer> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| Sealer::load_or_create(&path).unwrap()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let sealed = sealers[0].seal("c", "same");
        for s in &sealers {
            assert_eq!(s.open("c", &sealed).unwrap(), "same");
        }
    }
}
