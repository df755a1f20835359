//! `caching_sha2_password` (MySQL 8's default plugin): its scramble, the
//! packets of its exchanges, RSA for the full authentication without TLS,
//! and the salted hash idgate stores instead of a password. Bytes and
//! cryptography only; who may log in is decided by the caller.
//!
//! The exchange (server side; the client side mirrors it):
//! 1. the client sends `SHA256(pw) XOR SHA256(SHA256(SHA256(pw)) || nonce)`;
//! 2. a server that knows `SHA256(SHA256(pw))` checks it ("fast path") and
//!    sends [`FAST_AUTH_OK`] then OK; one that does not sends
//!    [`PERFORM_FULL_AUTH`];
//! 3. full authentication: over TLS the client sends the password and a
//!    NUL in clear; without TLS it asks for the server's RSA public key
//!    ([`REQUEST_PUBLIC_KEY`], answered `0x01` + PEM) and sends
//!    `RSA-OAEP-SHA1((pw || NUL) XOR nonce)`.

use rsa::pkcs1::DecodeRsaPrivateKey;
use rsa::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePublicKey, LineEnding};
use rsa::sha2::{Digest, Sha256};
use rsa::{Oaep, RsaPrivateKey, RsaPublicKey};

/// The plugin's name on the wire.
pub const CACHING_SHA2: &[u8] = b"caching_sha2_password";

/// Server to client after the scramble: the fast path accepted it (an OK follows).
pub const FAST_AUTH_OK: [u8; 2] = [0x01, 0x03];
/// Server to client: the scramble cannot be checked, send the password.
pub const PERFORM_FULL_AUTH: [u8; 2] = [0x01, 0x04];
/// Client to server: send me your RSA public key.
pub const REQUEST_PUBLIC_KEY: u8 = 0x02;
/// First byte of a server's "more data" packet (the public key, FAST_AUTH_OK...).
pub const MORE_DATA: u8 = 0x01;

/// SHA-256 of the parts, concatenated.
pub fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// `SHA256(SHA256(pw))`: what the fast path checks a scramble against.
pub fn stage2(password: &[u8]) -> [u8; 32] {
    sha256(&[&sha256(&[password])])
}

/// The client's scramble for `password` and `nonce` (empty for an empty password).
pub fn scramble(nonce: &[u8], password: &[u8]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let stage1 = sha256(&[password]);
    let mask = sha256(&[&sha256(&[&stage1]), nonce]);
    stage1.iter().zip(mask).map(|(a, b)| a ^ b).collect()
}

/// Equal in constant time (for equal lengths).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Checks a client's scramble against `SHA256(SHA256(pw))`: the scramble
/// XOR `SHA256(stage2 || nonce)` is `SHA256(pw)`, whose hash must be stage2.
pub fn verify_scramble(nonce: &[u8], stage2: &[u8; 32], token: &[u8]) -> bool {
    if token.len() != 32 {
        return false;
    }
    let mask = sha256(&[stage2, nonce]);
    let mut stage1 = [0u8; 32];
    for (i, b) in stage1.iter_mut().enumerate() {
        *b = token[i] ^ mask[i];
    }
    same(&sha256(&[&stage1]), stage2)
}

/// `(password || NUL) XOR nonce` (the nonce repeated): what is encrypted
/// with RSA, and what comes out of the decryption.
pub fn xor_nonce(data: &[u8], nonce: &[u8]) -> Vec<u8> {
    if nonce.is_empty() {
        return data.to_vec();
    }
    data.iter()
        .enumerate()
        .map(|(i, b)| b ^ nonce[i % nonce.len()])
        .collect()
}

/// Reads a server's public key (SPKI or PKCS#1 PEM).
fn public_key(pem: &[u8]) -> Result<RsaPublicKey, String> {
    let text = std::str::from_utf8(pem).map_err(|_| "the public key is not PEM text")?;
    let text = text.trim_end_matches('\0').trim();
    RsaPublicKey::from_public_key_pem(text)
        .or_else(|_| {
            use rsa::pkcs1::DecodeRsaPublicKey;
            RsaPublicKey::from_pkcs1_pem(text)
        })
        .map_err(|e| format!("cannot read the server's public key: {e}"))
}

/// Whether `pem` is an RSA public key [`encrypt_password`] can use (a
/// pinned shard key is checked when the config is loaded).
pub fn check_public_key(pem: &[u8]) -> Result<(), String> {
    public_key(pem).map(|_| ())
}

/// Encrypts `password` for a server whose public key is `pem` (SPKI
/// `BEGIN PUBLIC KEY`, or PKCS#1 `BEGIN RSA PUBLIC KEY`), as a client does
/// for the full authentication without TLS.
pub fn encrypt_password(pem: &[u8], nonce: &[u8], password: &[u8]) -> Result<Vec<u8>, String> {
    let key = public_key(pem)?;
    let mut plain = password.to_vec();
    plain.push(0);
    let plain = xor_nonce(&plain, nonce);
    key.encrypt(
        &mut rsa::rand_core::OsRng,
        Oaep::new::<sha1_010::Sha1>(),
        &plain,
    )
    .map_err(|e| format!("RSA encryption failed (password too long for the key?): {e}"))
}

/// A server's RSA key pair for the full authentication without TLS.
pub struct RsaKeys {
    private: RsaPrivateKey,
    /// The public key as sent to clients (SPKI PEM).
    pub public_pem: Vec<u8>,
}

impl std::fmt::Debug for RsaKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RsaKeys").finish_non_exhaustive()
    }
}

impl RsaKeys {
    fn from_private(private: RsaPrivateKey) -> Result<RsaKeys, String> {
        let public_pem = private
            .to_public_key()
            .to_public_key_pem(LineEnding::LF)
            .map_err(|e| format!("cannot encode the public key: {e}"))?
            .into_bytes();
        Ok(RsaKeys {
            private,
            public_pem,
        })
    }

    /// Reads a PEM private key (PKCS#8 `BEGIN PRIVATE KEY`, as
    /// `openssl genpkey` writes, or PKCS#1 `BEGIN RSA PRIVATE KEY`).
    pub fn from_pem(text: &str) -> Result<RsaKeys, String> {
        let private = RsaPrivateKey::from_pkcs8_pem(text)
            .or_else(|_| RsaPrivateKey::from_pkcs1_pem(text))
            .map_err(|e| format!("not a PEM RSA private key (PKCS#8 or PKCS#1): {e}"))?;
        Self::from_private(private)
    }

    /// A fresh 2048-bit key (MySQL's size). Takes a while: call it off the
    /// async threads, once.
    pub fn generate() -> Result<RsaKeys, String> {
        let private = RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048)
            .map_err(|e| format!("cannot generate an RSA key: {e}"))?;
        Self::from_private(private)
    }

    /// Decrypts a client's encrypted password: the password (without its
    /// NUL), or `None` for anything that does not decrypt.
    ///
    /// Blinded: the private-key operation runs on a random multiple of the
    /// ciphertext, so its timing says nothing about the value a client
    /// chose. The `rsa` crate's big-integer code is not constant-time
    /// (RUSTSEC-2023-0071, the Marvin attack, which needs very many timed
    /// decryptions); every failed one is a failed login, slowed down per
    /// address by the login delay (`throttle`).
    pub fn decrypt_password(&self, nonce: &[u8], cipher: &[u8]) -> Option<Vec<u8>> {
        let plain = self
            .private
            .decrypt_blinded(
                &mut rsa::rand_core::OsRng,
                Oaep::new::<sha1_010::Sha1>(),
                cipher,
            )
            .ok()?;
        let mut pw = xor_nonce(&plain, nonce);
        if pw.last() == Some(&0) {
            pw.pop();
        }
        Some(pw)
    }
}

/// HMAC-SHA256 (RFC 2104) of `msg` under `key`.
fn hmac_sha256(key: &[u8], msg: &[&[u8]]) -> [u8; 32] {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&sha256(&[key]));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let ipad: Vec<u8> = k.iter().map(|b| b ^ 0x36).collect();
    let opad: Vec<u8> = k.iter().map(|b| b ^ 0x5c).collect();
    let mut inner = Sha256::new();
    inner.update(&ipad);
    for m in msg {
        inner.update(m);
    }
    let inner: [u8; 32] = inner.finalize().into();
    sha256(&[&opad, &inner])
}

/// PBKDF2-HMAC-SHA256 (RFC 8018), one 32-byte block.
pub fn pbkdf2_sha256(password: &[u8], salt: &[u8], iterations: u32) -> [u8; 32] {
    let mut u = hmac_sha256(password, &[salt, &1u32.to_be_bytes()]);
    let mut out = u;
    for _ in 1..iterations {
        u = hmac_sha256(password, &[&u]);
        for (o, x) in out.iter_mut().zip(u) {
            *o ^= x;
        }
    }
    out
}

/// The prefix of idgate's caching_sha2_password `password_hash`.
pub const HASH_PREFIX: &str = "$idgate-sha2$";
/// Iterations [`Sha2Hash::new`] uses (OWASP's 2023 figure for
/// PBKDF2-SHA256 is higher, but every full authentication pays it: 10000
/// cost 3.9 ms here (benches/auth.rs), once per user and process, in the
/// range of MySQL's 5000 SHA-crypt rounds).
pub const HASH_ITERATIONS: u32 = 10_000;

/// A parsed `$idgate-sha2$<iterations>$<salt hex>$<key hex>`: PBKDF2-HMAC-SHA256
/// of the password. It cannot check a scramble (that needs
/// `SHA256(SHA256(pw))`), only a password: the fast path comes after one
/// full authentication, as in MySQL.
#[derive(Clone, PartialEq, Eq)]
pub struct Sha2Hash {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub key: [u8; 32],
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 || !text.is_ascii() {
        return None;
    }
    (0..text.len() / 2)
        .map(|i| u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

impl Sha2Hash {
    /// Hashes `password` with a fresh 16-byte salt.
    pub fn new(password: &[u8]) -> Sha2Hash {
        use rsa::rand_core::RngCore;
        let mut salt = vec![0u8; 16];
        rsa::rand_core::OsRng.fill_bytes(&mut salt);
        Self::with_salt(password, salt, HASH_ITERATIONS)
    }

    pub fn with_salt(password: &[u8], salt: Vec<u8>, iterations: u32) -> Sha2Hash {
        let key = pbkdf2_sha256(password, &salt, iterations);
        Sha2Hash {
            iterations,
            salt,
            key,
        }
    }

    /// The text form (what `idgate hash-password --plugin caching_sha2_password` prints).
    pub fn to_text(&self) -> String {
        format!(
            "{HASH_PREFIX}{}${}${}",
            self.iterations,
            hex(&self.salt),
            hex(&self.key)
        )
    }

    /// Parses the text form; the reason when it is not one.
    pub fn parse(text: &str) -> Result<Sha2Hash, &'static str> {
        const FORM: &str =
            "not $idgate-sha2$<iterations>$<salt hex>$<64 hex digits> (the form `idgate hash-password --plugin caching_sha2_password` prints)";
        let rest = text.strip_prefix(HASH_PREFIX).ok_or(FORM)?;
        let mut parts = rest.split('$');
        let (Some(iter), Some(salt), Some(key), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(FORM);
        };
        let iterations: u32 = iter.parse().map_err(|_| FORM)?;
        if !(1000..=10_000_000).contains(&iterations) {
            return Err("iterations must be from 1000 to 10000000");
        }
        let salt = unhex(salt).filter(|s| (8..=64).contains(&s.len()));
        let salt = salt.ok_or("the salt must be 16 to 128 hex digits")?;
        let key = unhex(key)
            .and_then(|k| <[u8; 32]>::try_from(k).ok())
            .ok_or(FORM)?;
        Ok(Sha2Hash {
            iterations,
            salt,
            key,
        })
    }

    /// Whether `password` is the one hashed (constant-time comparison).
    pub fn verify(&self, password: &[u8]) -> bool {
        same(
            &pbkdf2_sha256(password, &self.salt, self.iterations),
            &self.key,
        )
    }
}

impl std::fmt::Debug for Sha2Hash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sha2Hash(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scramble_verifies_against_stage2_only_with_the_right_password() {
        let nonce = b"0123456789abcdefghij";
        let t = scramble(nonce, b"secret");
        assert_eq!(t.len(), 32);
        assert!(verify_scramble(nonce, &stage2(b"secret"), &t));
        assert!(!verify_scramble(nonce, &stage2(b"other"), &t));
        assert!(!verify_scramble(
            b"another nonce 012345",
            &stage2(b"secret"),
            &t
        ));
        assert!(!verify_scramble(nonce, &stage2(b"secret"), &t[..31]));
        assert!(scramble(nonce, b"").is_empty());
    }

    #[test]
    fn scramble_matches_mysql_common() {
        // mysql_common is mysql_async's implementation of the client side.
        let nonce = [7u8; 20];
        let theirs = mysql_common::scramble::scramble_sha256(&nonce, b"pw").unwrap();
        assert_eq!(scramble(&nonce, b"pw"), theirs.to_vec());
    }

    #[test]
    fn pbkdf2_matches_rfc7914_vector() {
        // RFC 7914 section 11: P="passwd", S="salt", c=1 (first 32 bytes).
        assert_eq!(
            hex(&pbkdf2_sha256(b"passwd", b"salt", 1)),
            "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc"
        );
        // RFC 6070-style vector for SHA-256 (c = 4096), widely published.
        assert_eq!(
            hex(&pbkdf2_sha256(b"password", b"salt", 4096)),
            "c5e478d59288c841aa530db6845c4c8d962893a001ce4e11a4963873aa98134a"
        );
    }

    #[test]
    fn hash_text_round_trips_and_verifies() {
        let h = Sha2Hash::new(b"pw");
        let text = h.to_text();
        assert!(text.starts_with("$idgate-sha2$10000$"));
        let back = Sha2Hash::parse(&text).unwrap();
        assert!(back.verify(b"pw"));
        assert!(!back.verify(b"pW"));
        assert_ne!(Sha2Hash::new(b"pw").to_text(), text, "salted");
        for bad in [
            "",
            "*B69027D44F6E5EDC07F1AEAD1477967B16F28227",
            "$idgate-sha2$10000$00112233445566778899aabbccddeeff$00",
            "$idgate-sha2$10$00112233445566778899aabbccddeeff$",
            "$idgate-sha2$x$00$00",
        ] {
            assert!(Sha2Hash::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rsa_round_trip_with_a_generated_key() {
        let keys = RsaKeys::generate().unwrap();
        let nonce = b"abcdefghij0123456789";
        let c = encrypt_password(&keys.public_pem, nonce, b"secret").unwrap();
        assert_eq!(c.len(), 256);
        assert_eq!(keys.decrypt_password(nonce, &c).unwrap(), b"secret");
        assert_ne!(
            keys.decrypt_password(b"other nonce 01234567", &c).unwrap(),
            b"secret"
        );
        assert!(keys.decrypt_password(nonce, &c[1..]).is_none());
        assert!(keys.decrypt_password(nonce, b"garbage").is_none());
        assert!(encrypt_password(b"not a key", nonce, b"x").is_err());
    }
}
