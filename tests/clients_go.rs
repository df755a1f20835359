//! Go's database/sql with go-sql-driver/mysql as a real client (issue #14):
//! `tests/clients/go/idgate_go.go`, built with Debian's golang-go and
//! golang-github-go-sql-driver-mysql-dev (GOPATH mode, no module download),
//! logs in to idgate by mysql_native_password, caching_sha2_password's full
//! path by RSA and then its fast path, a wrong password, TLS verified
//! against the test bed's CA (`tls=custom`) with the full path over TLS, and
//! a `require_tls` account with and without TLS; then inserts into a rule
//! table by the text protocol and by a server-side prepared statement, and
//! its `LastInsertId()` must be the stored id and `LAST_INSERT_ID()`.
//!
//! `scripts/test.sh` installs the Go packages; under `CI=true` a missing
//! one fails the test, otherwise it is SKIPPED.

mod support;

use idgate::config::Config;
use idgate::protocol::sha2::Sha2Hash;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::proxy::{self, Proxy};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/go/idgate_go.go");
const GOPATH: &str = "/usr/share/gocode";
const DRIVER: &str = "/usr/share/gocode/src/github.com/go-sql-driver/mysql";

/// Builds the client into the test's own directory; `None` (skipped) when
/// Go or the driver is missing outside CI.
fn build() -> Option<PathBuf> {
    let go = support::process::tool("go", &["version"])?;
    if !Path::new(DRIVER).is_dir() {
        let msg = format!(
            "{DRIVER} missing; scripts/test.sh installs golang-github-go-sql-driver-mysql-dev"
        );
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{msg}");
        }
        eprintln!("SKIPPED: {msg}");
        return None;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("clients_go");
    std::fs::create_dir_all(&dir).expect("make the build directory");
    let bin = dir.join("idgate_go");
    let out = Command::new(go)
        .args(["build", "-o"])
        .arg(&bin)
        .arg(SRC)
        .env("GO111MODULE", "off")
        .env("GOPATH", GOPATH)
        .env("GOCACHE", dir.join("cache"))
        .env("GOFLAGS", "")
        .output()
        .expect("run go build");
    assert!(
        out.status.success(),
        "go build failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(bin)
}

/// Accounts beside the support ones (`app`/`secret` among them): `sha` and
/// `sha_t` with salted caching_sha2 hashes (full authentication first),
/// `nat` on mysql_native_password, `tlsonly` with `require_tls`.
fn users() -> String {
    let mut out = String::new();
    for (name, pw) in [("sha", "shapw"), ("sha_t", "shatpw")] {
        let hash = Sha2Hash::new(pw.as_bytes()).to_text();
        out.push_str(&format!(
            "[[users]]\nname = \"{name}\"\npassword_hash = \"{hash}\"\n"
        ));
    }
    out.push_str(
        "[[users]]\nname = \"nat\"\npassword = \"natpw\"\nauth = \"mysql_native_password\"\n\
         [[users]]\nname = \"tlsonly\"\npassword = \"tlspw\"\nrequire_tls = true\n",
    );
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_sql_driver_logs_in_by_every_path_and_reports_the_stored_id() {
    let Some(tb) = support::testbed() else { return };
    let Some(bin) = tokio::task::spawn_blocking(build).await.unwrap() else {
        return;
    };
    let schema = support::unique("cgo");
    proxy::admin(
        &tb,
        0,
        &[
            &format!("CREATE DATABASE `{schema}`"),
            &format!(
                "CREATE TABLE `{schema}`.t (id BIGINT PRIMARY KEY, k VARCHAR(32) NOT NULL UNIQUE)"
            ),
        ],
    )
    .await;
    let server = format!(
        "rsa_key = \"{}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n",
        tb.tls_file("rsa.key"),
        tb.tls_file("server.pem"),
        tb.tls_file("server.key")
    );
    let text = format!(
        "{}[allocator]\nstore = \"etcd\"\netcd_endpoints = [\"{}\"]\netcd_prefix = \"/cgo-{schema}\"\n{}",
        proxy::config_text(&tb, "127.0.0.1:0", &server),
        tb.etcd,
        users()
    );
    let cfg = Config::parse(&text, "test").expect("test config is valid");
    let rules = format!(
        "[[generator]]\nname = \"ids\"\nkind = \"sequence\"\nbatch = 20\n\n\
         [[table]]\nname = \"{schema}.t\"\ncolumn = \"id\"\ngenerator = \"ids\"\n"
    );
    let p = Proxy::start_config_rules(cfg, &rules).await;
    let (addr, ca) = (p.addr.to_string(), tb.tls_file("ca.pem"));
    let s = schema.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(bin)
            .args([&addr, &ca, &s])
            .output()
            .expect("run the Go client")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    let logins = [
        "native 42",
        "sha2_rsa 42",
        "sha2_fast 42",
        "sha2_wrong ERR 1045",
        "sha2_tls_full 42",
        "require_tls_plain ERR 3159",
        "require_tls_tls 42",
    ];
    assert_eq!(&lines[..logins.len()], &logins[..], "{stdout}");
    // sha: RSA, then fast; sha_t: full over TLS; app, tlsonly (plaintext
    // passwords): fast at once (the refused plaintext login never gets there).
    let [fast, tls_full, rsa_full, _keys] = p.shared.sha2.counts();
    assert_eq!((rsa_full, tls_full), (1, 1), "{stdout}");
    assert!(fast >= 3, "fast paths: {fast}");

    // Each insert: LastInsertId, the stored id, LAST_INSERT_ID(): all one
    // generated id, the second above the first.
    let mut previous = 0u64;
    for (line, name) in lines[logins.len()..]
        .iter()
        .zip(["insert_text", "insert_prepared"])
    {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), 4, "{name}: {line}");
        assert_eq!(f[0], name, "{stdout}");
        let id: u64 = f[1].parse().unwrap_or_else(|_| panic!("{line}"));
        assert!(id > previous, "{name}: {id} after {previous}");
        assert_eq!(f[2], f[1], "{name}: stored id vs LastInsertId");
        assert_eq!(f[3], f[1], "{name}: LAST_INSERT_ID() vs LastInsertId");
        previous = id;
    }
    assert_eq!(lines.len(), logins.len() + 2, "{stdout}");
    p.stop().await;
}
