//! Hex SHA-256: how the engine and the web node keep what must be
//! compared but never read back (an API token, a worker's identity
//! secret, a sign-in's state and browser cookie) and derive a session's
//! CSRF token.

use sha2::Digest as _;

/// The SHA-256 of `data`, as 64 lowercase hex digits.
pub fn sha256_hex(data: impl AsRef<[u8]>) -> String {
    hex::encode(sha2::Sha256::digest(data))
}

#[cfg(test)]
mod tests {
    #[test]
    fn it_is_the_fips_180_2_vector() {
        assert_eq!(
            super::sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
