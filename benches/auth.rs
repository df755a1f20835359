//! Criterion benchmarks of the CPU a login costs idgate, per path:
//!
//! - `fast_path`: checking a caching_sha2_password scramble against
//!   SHA256(SHA256(pw)) (every login of a user whose hash is known);
//! - `native`: checking a mysql_native_password token (the baseline);
//! - `rsa_decrypt`: decrypting the password of a full authentication
//!   without TLS (2048-bit RSA-OAEP, once per user and process);
//! - `pbkdf2_10000`: checking a password against a `$idgate-sha2$` hash
//!   (every full authentication of a hashed user).

use criterion::{criterion_group, criterion_main, Criterion};
use idgate::config::Secret;
use idgate::protocol::sha2::{self, RsaKeys, Sha2Hash};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let nonce = *b"0123456789abcdefghij";
    let mut g = c.benchmark_group("auth");
    let stage2 = sha2::stage2(b"app-secret");
    let token = sha2::scramble(&nonce, b"app-secret");
    g.bench_function("fast_path", |b| {
        b.iter(|| {
            assert!(sha2::verify_scramble(
                black_box(&nonce),
                &stage2,
                black_box(&token)
            ))
        })
    });
    let secret = Secret::NativeHash(
        idgate::config::parse_native_hash(&idgate::config::native_hash_text(b"app-secret"))
            .unwrap(),
    );
    let ntoken = idgate::protocol::handshake::native_token(&nonce, b"app-secret");
    g.bench_function("native", |b| {
        b.iter(|| assert!(secret.verify_native(black_box(&nonce), black_box(&ntoken))))
    });
    let keys = RsaKeys::generate().unwrap();
    let cipher = sha2::encrypt_password(&keys.public_pem, &nonce, b"app-secret").unwrap();
    g.bench_function("rsa_decrypt", |b| {
        b.iter(|| keys.decrypt_password(black_box(&nonce), black_box(&cipher)))
    });
    let hash = Sha2Hash::new(b"app-secret");
    g.sample_size(20);
    g.bench_function("pbkdf2_10000", |b| {
        b.iter(|| assert!(hash.verify(black_box(b"app-secret"))))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
