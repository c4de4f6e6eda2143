//! A refused attempt writes nothing: the pipeline leaves the document as it was, so the
//! server records no change (no oplog entry, no change event) and waiters watching the
//! collection only wake up for real changes.

mod common;

use common::env;
use futures_util::StreamExt;
use mongolock::LockDetails;

#[tokio::test]
async fn refused_attempts_produce_no_change_events() {
    let env = env("quiet").await;
    let locks = &env.locks;
    let _ = locks
        .xlock("r", "holder", LockDetails::default())
        .await
        .unwrap();
    let mut events = match env.collection().watch().await {
        Ok(stream) => stream,
        Err(error) => {
            eprintln!("skipped: change streams need a replica set ({error})");
            return;
        }
    };
    for waiter in 0..5 {
        let refused = locks
            .xlock("r", &format!("waiter-{waiter}"), LockDetails::default())
            .await;
        assert!(refused.unwrap_err().is_already_locked());
        let again = locks
            .xlock("r", "holder", LockDetails::default())
            .await
            .unwrap();
        assert!(!again.is_new());
    }
    locks.unlock("holder").await.unwrap();
    // A marker, to know when every earlier change has been seen.
    env.collection()
        .insert_one(bson::doc! { "_id": "marker" })
        .await
        .unwrap();

    let mut changes_to_r = 0;
    loop {
        let event = events
            .next()
            .await
            .expect("an event")
            .expect("a change event");
        let key = event.document_key.expect("a document key");
        if key == bson::doc! { "_id": "marker" } {
            break;
        }
        assert_eq!(key, bson::doc! { "_id": "r" });
        changes_to_r += 1;
    }
    assert_eq!(changes_to_r, 1, "only the release changed the document");
}
