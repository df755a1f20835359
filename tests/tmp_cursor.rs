mod support;
use idgate::protocol::consts::{cap, cmd};
use idgate::protocol::response::Expect;
use support::proxy::{self, RawClient};
#[tokio::test]
async fn dbg() {
    let Some(tb) = support::testbed() else { return };
    for caps in [
        proxy::CLIENT_CAPS & !cap::DEPRECATE_EOF,
        proxy::CLIENT_CAPS | cap::DEPRECATE_EOF,
    ] {
        let mut g = RawClient::direct(&tb, 0, caps).await;
        eprintln!("deprecate_eof={}", g.deprecate_eof());
        let r = g
            .command(
                &[
                    &[cmd::STMT_PREPARE][..],
                    b"SELECT 1 AS a UNION ALL SELECT 2 UNION ALL SELECT 3",
                ]
                .concat(),
                Expect::Prepare,
            )
            .await;
        let id = u32::from_le_bytes([r[0][1], r[0][2], r[0][3], r[0][4]]);
        let mut e = vec![cmd::STMT_EXECUTE];
        e.extend_from_slice(&id.to_le_bytes());
        e.push(1);
        e.extend_from_slice(&1u32.to_le_bytes());
        g.send(&e).await;
        for _ in 0..6 {
            match tokio::time::timeout(std::time::Duration::from_millis(500), g.read()).await {
                Ok(Some((s, p))) => eprintln!(" exec seq {s} {:?}", &p[..p.len().min(24)]),
                _ => break,
            }
        }
        for _ in 0..3 {
            let mut f = vec![cmd::STMT_FETCH];
            f.extend_from_slice(&id.to_le_bytes());
            f.extend_from_slice(&2u32.to_le_bytes());
            g.send(&f).await;
            for _ in 0..6 {
                match tokio::time::timeout(std::time::Duration::from_millis(500), g.read()).await {
                    Ok(Some((s, p))) => eprintln!(" fetch seq {s} {:?}", &p[..p.len().min(24)]),
                    _ => break,
                }
            }
        }
    }
}
