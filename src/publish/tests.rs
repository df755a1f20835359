//! Publishing over the in-memory store: versions, the compare-and-swap
//! between two pushers, history, a lost reply.

use super::*;
use crate::idgen::{Fault, MemoryStore};
use crate::rules::bundle::BundleFile;

fn who(u: &str) -> Who {
    Who {
        user: u.into(),
        host: "h".into(),
    }
}

fn files(text: &str) -> Vec<BundleFile> {
    vec![BundleFile {
        name: "a.toml".into(),
        text: text.into(),
    }]
}

fn published() -> (Arc<MemoryStore>, Published) {
    let m = MemoryStore::new();
    let store: Arc<dyn Store> = m.clone();
    (m, Published::new(store, Duration::from_secs(5)))
}

#[tokio::test]
async fn versions_count_up_and_are_kept() {
    let (_, p) = published();
    assert_eq!(p.current().await.unwrap(), None);
    assert_eq!(p.fetch_current().await.unwrap(), None);
    let m1 = p
        .publish(None, files("# one\n"), vec![], None, &who("ann"), 10)
        .await
        .unwrap();
    assert_eq!(m1.version, 1);
    let cur = p.current().await.unwrap();
    assert_eq!(cur.map(|c| c.0), Some(1));
    let m2 = p
        .publish(
            cur,
            files("# two\n"),
            vec!["table added t".into()],
            None,
            &who("bob"),
            20,
        )
        .await
        .unwrap();
    assert_eq!(m2.version, 2);
    assert_eq!(p.fetch(1).await.unwrap().unwrap().files, files("# one\n"));
    let now = p.fetch_current().await.unwrap().unwrap();
    assert_eq!(now.meta, m2);
    assert_eq!(now.files, files("# two\n"));
    let h = p.history().await.unwrap();
    assert_eq!(h, vec![m1, m2]);
    assert_eq!(p.fetch(3).await.unwrap(), None);
}

/// Two pushers read version 1; the first to publish wins, the second is
/// told which version won and by whom, and nothing of it is written.
#[tokio::test]
async fn the_second_of_two_concurrent_pushes_loses() {
    let (_, p) = published();
    p.publish(None, files("# one\n"), vec![], None, &who("ann"), 10)
        .await
        .unwrap();
    let read_by_both = p.current().await.unwrap();
    let won = p
        .publish(
            read_by_both,
            files("# ann\n"),
            vec![],
            None,
            &who("ann"),
            11,
        )
        .await
        .unwrap();
    assert_eq!(won.version, 2);
    let lost = p
        .publish(
            read_by_both,
            files("# bob\n"),
            vec![],
            None,
            &who("bob"),
            12,
        )
        .await
        .unwrap_err();
    let PushError::Lost(msg) = lost else {
        panic!("{lost:?}")
    };
    assert!(
        msg.starts_with("version 2 was published by ann@h at 1970-01-01 00:00:11 UTC"),
        "{msg}"
    );
    assert!(msg.contains("nothing was published"), "{msg}");
    assert_eq!(p.current().await.unwrap().map(|c| c.0), Some(2));
    assert_eq!(
        p.fetch_current().await.unwrap().unwrap().files,
        files("# ann\n")
    );
    assert_eq!(p.history().await.unwrap().len(), 2);
    // Two first pushes into an empty store: the same.
    let (_, q) = published();
    q.publish(None, files("a"), vec![], None, &who("ann"), 1)
        .await
        .unwrap();
    assert!(matches!(
        q.publish(None, files("b"), vec![], None, &who("bob"), 1)
            .await,
        Err(PushError::Lost(_))
    ));
}

/// The store applies the transaction but the reply is lost: the push
/// reads its version back and sees its own nonce.
#[tokio::test]
async fn a_lost_reply_is_resolved_by_reading_the_version_back() {
    let (m, p) = published();
    m.set_fault(Fault::LoseReply);
    let r = p
        .publish(None, files("# one\n"), vec![], None, &who("ann"), 10)
        .await;
    m.set_fault(Fault::None);
    // The read-back ran under the fault too (its reply was fine: reads are
    // not lost), so the push knows it won.
    let meta = r.unwrap();
    assert_eq!(meta.version, 1);
    assert_eq!(p.fetch_current().await.unwrap().unwrap().meta, meta);
    // A store that fails outright: nothing is written, the error says so.
    m.set_fault(Fault::Fail);
    let e = p
        .publish(
            p.current().await.ok().flatten(),
            files("x"),
            vec![],
            None,
            &who("a"),
            1,
        )
        .await;
    m.set_fault(Fault::None);
    assert!(matches!(e, Err(PushError::Store(_))), "{e:?}");
    assert_eq!(p.current().await.unwrap().map(|c| c.0), Some(1));
}

/// The file store keeps no documents: the error says what is needed.
#[tokio::test]
async fn the_state_file_cannot_hold_published_rules() {
    let dir = tempfile::tempdir().unwrap();
    let fs =
        crate::idgen::FileStore::open(&dir.path().join("state"), Duration::from_secs(5)).unwrap();
    let p = Published::new(Arc::new(fs), Duration::from_secs(5));
    let e = p.fetch(1).await.unwrap_err();
    assert!(e.contains("store = \"etcd\""), "{e}");
}

/// `check_change`: a refused change names file:line; a table moved onto a
/// generator whose ids would collide is refused against the store.
#[tokio::test]
async fn check_change_refuses_what_a_reload_refuses() {
    let (m, p) = published();
    let ok = |_: &crate::rules::GeneratorRule| Ok(());
    let load = |text: &str| {
        RuleSet::from_toml(std::path::Path::new("v1/a.toml"), text, &["s0"], &ok).unwrap()
    };
    let old = load(
        "[[generator]]\nname = \"a\"\nkind = \"sequence\"\n\n[[generator]]\nname = \"b\"\nkind = \"sequence\"\n\n[[table]]\nname = \"s.t\"\ncolumn = \"id\"\ngenerator = \"a\"\n",
    );
    let start = load(
        "[[generator]]\nname = \"a\"\nkind = \"sequence\"\nstart = 5\n\n[[generator]]\nname = \"b\"\nkind = \"sequence\"\n\n[[table]]\nname = \"s.t\"\ncolumn = \"id\"\ngenerator = \"a\"\n",
    );
    let e = check_change(p.store(), &old, &start, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(e.starts_with("v1/a.toml:2: "), "{e}");
    let moved = load(
        "[[generator]]\nname = \"a\"\nkind = \"sequence\"\n\n[[generator]]\nname = \"b\"\nkind = \"sequence\"\n\n[[table]]\nname = \"s.t\"\ncolumn = \"id\"\ngenerator = \"b\"\n",
    );
    // `a` has issued ids (its high-water is in the store): `b` starting
    // at 1 would repeat them.
    let store: Arc<dyn Store> = m.clone();
    let a = crate::idgen::Allocator::with_store(
        store,
        Arc::new(crate::idgen::SystemClock::new()),
        old.generators(),
    )
    .await
    .unwrap();
    let mut ids = Vec::new();
    a.generator("a").unwrap().next(3, &mut ids).await.unwrap();
    let e = check_change(p.store(), &old, &moved, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(
        e.starts_with("v1/a.toml:10: table \"s.t\" moves to another generator"),
        "{e}"
    );
    a.shutdown().await;
    let same = check_change(p.store(), &old, &old, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(same.is_empty());
}
