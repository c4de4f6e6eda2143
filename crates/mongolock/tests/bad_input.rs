//! Bad input is a typed error, never a panic and never a write; documents of another shape are
//! typed errors and are left as they are.

mod common;

use std::time::Duration;

use bson::{Bson, doc};
use common::{env, invalid_argument, secs};
use mongolock::{ErrorKind, Filter, LockDetails, MAX_ID_LEN, MAX_TTL};

#[tokio::test]
async fn bad_arguments_are_refused_before_anything_is_written() {
    let env = env("bad_args").await;
    let locks = &env.locks;
    let d = LockDetails::default;
    let long = "x".repeat(MAX_ID_LEN + 1);
    let cases = [
        (locks.xlock("", "a", d()).await, "resource"),
        (locks.xlock("r", "", d()).await, "lock_id"),
        (locks.xlock(&long, "a", d()).await, "resource"),
        (locks.slock("r", &long, d(), None).await, "lock_id"),
        (locks.xlock("r", "a", d().ttl(Duration::ZERO)).await, "ttl"),
        (
            locks.xlock("r", "a", d().ttl(MAX_TTL + secs(1))).await,
            "ttl",
        ),
        (locks.xlock("r", "a", d().ttl(Duration::MAX)).await, "ttl"),
        (locks.slock("r", "a", d(), Some(0)).await, "max"),
        (
            locks.xlock("r", "a", d().owner("o".repeat(5000))).await,
            "owner",
        ),
    ];
    for (result, argument) in cases {
        assert_eq!(invalid_argument(&result.unwrap_err()), argument);
    }
    assert_eq!(
        invalid_argument(&locks.unlock("").await.unwrap_err()),
        "lock_id"
    );
    assert_eq!(
        invalid_argument(
            &locks
                .status(&Filter::default().resource(""))
                .await
                .unwrap_err()
        ),
        "resource"
    );
    assert_eq!(env.collection().count_documents(doc! {}).await.unwrap(), 0);
}

#[tokio::test]
async fn ids_that_look_like_operators_are_plain_data() {
    let env = env("bad_dollar").await;
    let locks = &env.locks;
    let grant = locks
        .xlock(
            "$$NOW",
            "$exclusive",
            LockDetails::default().owner("$owner"),
        )
        .await
        .unwrap();
    assert_eq!((grant.resource(), grant.lock_id()), ("$$NOW", "$exclusive"));
    common::assert_xlock_refused(locks, "$$NOW", "b").await;
    let status = locks
        .status(&Filter::default().owner("$owner"))
        .await
        .unwrap();
    assert_eq!(status.len(), 1);
    assert_eq!(locks.unlock("$exclusive").await.unwrap(), 1);
    let max = "m".repeat(MAX_ID_LEN);
    let _ = locks
        .xlock(&max, &max, LockDetails::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_foreign_document_is_a_typed_error_and_is_left_alone() {
    let env = env("bad_foreign").await;
    let collection = env.collection();
    // square/mongo-lock's shape, stored under a resource name.
    let foreign = doc! {
        "_id": "r", "resource": "r",
        "exclusive": { "lockId": "a", "acquired": true },
        "shared": { "count": 0, "locks": [] },
    };
    collection.insert_one(foreign.clone()).await.unwrap();

    let error = env
        .locks
        .xlock("r", "b", LockDetails::default())
        .await
        .unwrap_err();
    assert!(
        matches!(error.kind(), ErrorKind::UnexpectedDocument { .. }),
        "{error:?}"
    );
    let error = env
        .locks
        .slock("r", "b", LockDetails::default(), None)
        .await
        .unwrap_err();
    assert!(
        matches!(error.kind(), ErrorKind::UnexpectedDocument { .. }),
        "{error:?}"
    );
    let error = env.locks.status(&Filter::default()).await.unwrap_err();
    assert!(
        matches!(error.kind(), ErrorKind::UnexpectedDocument { .. }),
        "{error:?}"
    );
    // Group operations are decided by the server in one write, which passes over a document
    // of another shape: nothing of it is released or renewed, and nothing is counted.
    assert_eq!(env.locks.unlock("a").await.unwrap(), 0);
    assert_eq!(env.locks.renew("a", secs(5)).await.unwrap(), 0);
    assert_eq!(env.locks.purge().await.unwrap().resources(), 0);

    let stored = collection
        .find_one(doc! { "_id": "r" })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored, foreign, "left exactly as it was");
}

#[tokio::test]
async fn odd_but_harmless_documents_do_not_panic() {
    let env = env("bad_odd").await;
    let collection = env.collection();
    collection
        .insert_many([
            doc! { "_id": "bad-fence", "fence": "seven" },
            doc! { "_id": "bad-entry", "fence": 3_i64, "exclusive": Bson::Null, "shared": [{ "lockId": 5 }] },
            doc! { "_id": "bad-dates", "fence": 3_i64, "exclusive": { "lockId": "a", "token": 3_i64, "createdAt": "now", "renewedAt": "now" }, "shared": [] },
        ])
        .await
        .unwrap();
    for resource in ["bad-fence", "bad-entry", "bad-dates"] {
        let error = env
            .locks
            .xlock(resource, "z", LockDetails::default())
            .await
            .unwrap_err();
        assert!(
            matches!(error.kind(), ErrorKind::UnexpectedDocument { .. }),
            "{resource}: {error:?}"
        );
    }
    assert_eq!(
        collection
            .count_documents(doc! { "exclusive.lockId": "z" })
            .await
            .unwrap(),
        0,
        "nothing granted"
    );
}

/// A lock document (it carries the mark) changed by hand, field by field, is outside what the
/// mark tells apart (see `command/expr.rs`): every call on it still comes back, with a value
/// or a typed error (the lock's, the document's or the server's), and never panics.
#[tokio::test]
async fn a_marked_document_changed_by_hand_is_a_typed_error_never_a_panic() {
    let env = env("bad_marked").await;
    let collection = env.collection();
    let now = bson::DateTime::now();
    let entry = doc! {
        "lockId": "a", "nonce": bson::oid::ObjectId::new(), "owner": "o", "host": "h",
        "keeper": Bson::Null, "token": 7_i64, "createdAt": now, "renewedAt": now,
        "expiresAt": Bson::Null, "ttlMs": Bson::Null,
    };
    let mut bad_token = entry.clone();
    bad_token.insert("token", 1.5);
    let mut bad_expiry = entry.clone();
    bad_expiry.insert("expiresAt", "tomorrow");
    let documents = [
        doc! { "_id": "x-string", "mongolock": 1, "fence": 7_i64, "exclusive": "a", "shared": [] },
        doc! { "_id": "s-object", "mongolock": 1, "fence": 7_i64, "exclusive": Bson::Null, "shared": entry.clone() },
        doc! { "_id": "fence-string", "mongolock": 1, "fence": "seven", "exclusive": Bson::Null, "shared": [] },
        doc! { "_id": "token-double", "mongolock": 1, "fence": 7_i64, "exclusive": bad_token, "shared": [] },
        doc! { "_id": "expiry-string", "mongolock": 1, "fence": 7_i64, "exclusive": Bson::Null, "shared": [bad_expiry] },
        doc! { "_id": "queue-numbers", "mongolock": 1, "fence": 7_i64, "exclusive": entry, "shared": [], "queue": [1, 2] },
    ];
    collection.insert_many(documents.clone()).await.unwrap();
    // A hand-made entry may count as expired (an `expiresAt` that is not a date), and the
    // lock is then granted past it: any outcome of a lock call is allowed but a panic, a hang
    // or an error that blames the call's arguments.
    let typed = |what: String, error: mongolock::Error| {
        assert!(
            !matches!(
                error.kind(),
                ErrorKind::InvalidArgument { .. } | ErrorKind::Timeout { .. }
            ),
            "{what}: {error:?}"
        );
    };
    for document in &documents {
        let resource = document.get_str("_id").unwrap().to_owned();
        let locks = env.locks.clone();
        // Each resource in a task of its own: a panic fails the test with its name.
        let outcome = tokio::spawn(async move {
            let d = LockDetails::default;
            let mut errors = Vec::new();
            let mut note = |call: &str, result: Result<(), mongolock::Error>| {
                if let Err(error) = result {
                    errors.push((format!("{resource} / {call}"), error));
                }
            };
            note("xlock", locks.xlock(&resource, "z", d()).await.map(drop));
            note(
                "slock",
                locks.slock(&resource, "z", d(), Some(3)).await.map(drop),
            );
            let mutex = locks.mutex(&resource).ttl(secs(5));
            note(
                "mutex.acquire_timeout",
                mutex
                    .acquire_timeout(Duration::from_millis(100))
                    .await
                    .map(drop),
            );
            note(
                "force_release",
                locks.force_release(&resource).await.map(drop),
            );
            note(
                "status",
                locks
                    .status(&Filter::default().resource(&resource))
                    .await
                    .map(drop),
            );
            errors
        })
        .await
        .expect("no call panics");
        for (what, error) in outcome {
            typed(what, error);
        }
    }
    // The calls over every document, once the others are done (an unlock of `a` frees the
    // documents above of their entries of `a`).
    let locks = env.locks.clone();
    let outcome = tokio::spawn(async move {
        [
            ("status", locks.status(&Filter::default()).await.map(drop)),
            ("renew", locks.renew("a", secs(5)).await.map(drop)),
            ("purge", locks.purge().await.map(drop)),
            ("unlock", locks.unlock("a").await.map(drop)),
        ]
    })
    .await
    .expect("no call panics");
    for (call, result) in outcome {
        if let Err(error) = result {
            typed(call.to_owned(), error);
        }
    }
}
