//! Reading a shard connection's `LAST_INSERT_ID()`, and settling the claim
//! a pooled connection carries on a session's value (`backend::lidclaim`)
//! before another session uses it or the pool closes it. Shared by the
//! multiplexer (`mux.rs`), the pool's closing path (`pooled.rs`) and the
//! routed copy of the value between shards (`lastid.rs`), which depend on
//! it, never on each other for it.

/// A connection's `LAST_INSERT_ID()` (`SELECT LAST_INSERT_ID()`, after
/// the replies to idgate's detached commands, which `query_rows` reads
/// first).
pub(in crate::frontend) async fn query_lid(
    conn: &mut crate::backend::BackendConn,
) -> Result<u64, crate::backend::BackendError> {
    let rows = conn.query_rows("SELECT LAST_INSERT_ID()").await?;
    Ok(rows
        .first()
        .and_then(|r| r.first().cloned().flatten())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0))
}

/// [`query_lid`] within `timeout`; the reason when it cannot be read.
pub(in crate::frontend) async fn read_lid(
    conn: &mut crate::backend::BackendConn,
    timeout: std::time::Duration,
) -> Result<u64, String> {
    match tokio::time::timeout(timeout, query_lid(conn)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no reply in {} ms", timeout.as_millis())),
    }
}

/// Settles the claim a connection carries, if its session still wants the
/// value: read before the connection is closed or used by another.
pub(in crate::frontend) async fn settle_claim(
    conn: &mut crate::backend::BackendConn,
    timeout: std::time::Duration,
) -> Option<u64> {
    let claim = conn.lid_claim.take()?;
    if !claim.wanted() {
        return None;
    }
    // Boxed: rare, and the futures that wait for it are on every
    // statement's path.
    let v = match Box::pin(read_lid(conn, timeout)).await {
        Ok(v) => Some(v),
        Err(why) => {
            // The session that left the value keeps the last one idgate
            // knew, and a taker closes the connection and takes another
            // (`pooled.rs`, `after_broken_take`): say why.
            tracing::warn!(
                shard = %conn.shard,
                backend_conn = conn.connection_id,
                "reading LAST_INSERT_ID() on a pooled connection failed: {why}"
            );
            None
        }
    };
    claim.settle(v);
    v
}
