//! Writes through a `Fence` to a protected collection: a holder whose lease ended (paused past
//! its TTL, revoked, deposed) is refused once a newer holder has written, with
//! `ErrorKind::StaleToken`, and the document keeps the newer holder's data.

mod common;

use bson::{Bson, Document, doc};
use common::{env, invalid_argument, secs};
use mongodb::Collection;
use mongolock::{ErrorKind, Fence, LockDetails};

/// The stored and presented tokens of a stale-token error (panics on any other error).
fn stale(error: &mongolock::Error) -> (i64, i64) {
    match error.kind() {
        ErrorKind::StaleToken {
            stored, presented, ..
        } => (*stored, *presented),
        other => panic!("expected StaleToken, got {other:?}"),
    }
}

async fn account(accounts: &Collection<Document>, id: &str) -> Document {
    accounts
        .find_one(doc! {"_id": id})
        .await
        .unwrap()
        .expect("the account exists")
}

#[tokio::test]
async fn a_paused_holder_is_refused_once_its_successor_wrote() {
    let env = env("fenced_paused").await;
    let accounts: Collection<Document> = env.db.collection("accounts");
    let first = env
        .locks
        .mutex("account-1")
        .ttl(secs(30))
        .acquire()
        .await
        .unwrap();
    first
        .fence()
        .update_one(
            &accounts,
            doc! {"_id": "account-1"},
            doc! {"$set": {"balance": 100, "by": "first"}},
        )
        .upsert(true)
        .await
        .unwrap();

    // The first holder stops (a GC pause, a suspended VM) past its TTL, and its lease ends
    // on the server: by the server's clock where it can be moved, by an operator elsewhere.
    if env.has_clock() {
        env.advance(secs(61));
    } else {
        assert_eq!(env.locks.force_release("account-1").await.unwrap(), 1);
    }
    let others = env.other_client().await;
    let second = others
        .mutex("account-1")
        .try_acquire()
        .await
        .unwrap()
        .expect("the first lease is over");
    assert!(second.fencing_token() > first.fencing_token());
    second
        .fence()
        .update_one(
            &accounts,
            doc! {"_id": "account-1"},
            doc! {"$inc": {"balance": -30}, "$set": {"by": "second"}},
        )
        .await
        .unwrap();

    // The first holder wakes up and carries on with its write: refused.
    let error = first
        .fence()
        .update_one(
            &accounts,
            doc! {"_id": "account-1"},
            doc! {"$set": {"balance": 0, "by": "first, late"}},
        )
        .await
        .unwrap_err();
    assert_eq!(
        stale(&error),
        (second.fencing_token(), first.fencing_token())
    );
    assert!(error.is_stale_token());
    assert!(!error.is_outcome_unknown() && !error.is_retryable());
    assert!(error.to_string().contains("\"account-1\""), "{error}");
    let stored = account(&accounts, "account-1").await;
    assert_eq!(stored.get_i32("balance").unwrap(), 70);
    assert_eq!(stored.get_str("by").unwrap(), "second");
    assert_eq!(stored.get_i64("_fence").unwrap(), second.fencing_token());
    second.release().await.unwrap();
    drop(first);
}

#[tokio::test]
async fn a_holder_whose_lease_expired_is_refused_and_so_is_a_deposed_leader() {
    let env = env("fenced_expired").await;
    let accounts: Collection<Document> = env.db.collection("accounts");
    // A grant of the low-level API is never renewed: its holder is as good as paused.
    let ttl = std::time::Duration::from_millis(200);
    let old = env
        .locks
        .xlock("account-2", "old", LockDetails::default().ttl(ttl))
        .await
        .unwrap();
    let old_fence = Fence::new(old.fencing_token());
    old_fence
        .update_one(
            &accounts,
            doc! {"_id": "account-2"},
            doc! {"$set": {"v": 1}},
        )
        .upsert(true)
        .await
        .unwrap();
    if env.has_clock() {
        env.advance(secs(1));
    } else {
        tokio::time::sleep(ttl * 2).await;
    }
    let new = env
        .locks
        .xlock("account-2", "new", LockDetails::default())
        .await
        .expect("the old grant expired");
    Fence::new(new.fencing_token())
        .update_one(
            &accounts,
            doc! {"_id": "account-2"},
            doc! {"$set": {"v": 2}},
        )
        .await
        .unwrap();
    let error = old_fence
        .update_one(
            &accounts,
            doc! {"_id": "account-2"},
            doc! {"$set": {"v": 3}},
        )
        .await
        .unwrap_err();
    assert_eq!(stale(&error), (new.fencing_token(), old.fencing_token()));
    assert_eq!(
        account(&accounts, "account-2").await.get_i32("v").unwrap(),
        2
    );

    // Leaders write with their term; a deposed one is refused once the next one wrote.
    let election = env.locks.election("scheduler");
    let deposed = election.campaign("a").await.unwrap();
    deposed
        .fence()
        .update_one(
            &accounts,
            doc! {"_id": "schedule"},
            doc! {"$set": {"by": "a"}},
        )
        .upsert(true)
        .await
        .unwrap();
    env.locks.force_release("scheduler").await.unwrap();
    let next = election
        .try_campaign("b")
        .await
        .unwrap()
        .expect("the election is free");
    next.fence()
        .update_one(
            &accounts,
            doc! {"_id": "schedule"},
            doc! {"$set": {"by": "b"}},
        )
        .await
        .unwrap();
    let error = deposed
        .fence()
        .update_one(
            &accounts,
            doc! {"_id": "schedule"},
            doc! {"$set": {"by": "a"}},
        )
        .await
        .unwrap_err();
    assert_eq!(stale(&error), (next.term(), deposed.term()));
    assert_eq!(
        account(&accounts, "schedule").await.get_str("by").unwrap(),
        "b"
    );
}

#[tokio::test]
async fn an_equal_token_writes_again() {
    let env = env("fenced_retry").await;
    let accounts: Collection<Document> = env.db.collection("accounts");
    let fence = Fence::new(50);
    let filter = doc! {"_id": "account-3"};
    for round in 0..2 {
        let written = fence
            .update_one(&accounts, filter.clone(), doc! {"$set": {"balance": 7}})
            .upsert(true)
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e:?}"));
        assert_eq!(
            written.matched_count + written.upserted_id.iter().count() as u64,
            1
        );
    }
    for round in 0..2 {
        let written = fence
            .replace_one(
                &accounts,
                filter.clone(),
                doc! {"_id": "account-3", "balance": 8},
            )
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e:?}"));
        assert_eq!(written.matched_count, 1);
    }
    let stored = account(&accounts, "account-3").await;
    assert_eq!(stored.get_i32("balance").unwrap(), 8);
    assert_eq!(stored.get_i64("_fence").unwrap(), 50);
}

#[tokio::test]
async fn a_document_never_fenced_accepts_the_first_write() {
    let env = env("fenced_first").await;
    let accounts: Collection<Document> = env.db.collection("accounts");
    accounts
        .insert_one(doc! {"_id": "account-4", "balance": 1})
        .await
        .unwrap();
    let written = Fence::new(5)
        .update_one(
            &accounts,
            doc! {"_id": "account-4"},
            doc! {"$inc": {"balance": 1}},
        )
        .await
        .unwrap();
    assert_eq!(written.modified_count, 1);
    let stored = account(&accounts, "account-4").await;
    assert_eq!(stored.get_i32("balance").unwrap(), 2);
    assert_eq!(stored.get_i64("_fence").unwrap(), 5);
    // From now on the document is fenced.
    let error = Fence::new(4)
        .update_one(
            &accounts,
            doc! {"_id": "account-4"},
            doc! {"$inc": {"balance": 1}},
        )
        .await
        .unwrap_err();
    assert_eq!(stale(&error), (5, 4));
}

#[tokio::test]
async fn pipeline_updates_are_fenced() {
    let env = env("fenced_pipeline").await;
    let accounts: Collection<Document> = env.db.collection("accounts");
    accounts
        .insert_one(doc! {"_id": "account-5", "balance": 10, "_fence": 20_i64})
        .await
        .unwrap();
    let double = |by: &str| {
        vec![
            doc! {"$set": {"balance": {"$multiply": ["$balance", 2]}, "by": by}},
            // The fence's own stage comes last and wins over this one.
            doc! {"$set": {"_fence": 0_i64}},
        ]
    };
    let error = Fence::new(19)
        .update_one(&accounts, doc! {"_id": "account-5"}, double("old"))
        .await
        .unwrap_err();
    assert_eq!(stale(&error), (20, 19));
    Fence::new(21)
        .update_one(&accounts, doc! {"_id": "account-5"}, double("new"))
        .await
        .unwrap();
    let stored = account(&accounts, "account-5").await;
    assert_eq!(stored.get_i32("balance").unwrap(), 20);
    assert_eq!(stored.get_str("by").unwrap(), "new");
    assert_eq!(stored.get_i64("_fence").unwrap(), 21);
    let error = Fence::new(20)
        .update_one(&accounts, doc! {"_id": "account-5"}, double("old"))
        .await
        .unwrap_err();
    assert_eq!(stale(&error), (21, 20));
}

#[tokio::test]
async fn replacements_are_fenced() {
    let env = env("fenced_replace").await;
    let accounts: Collection<Document> = env.db.collection("accounts");
    accounts
        .insert_one(doc! {"_id": "account-6", "balance": 10, "_fence": 20_i64})
        .await
        .unwrap();
    let error = Fence::new(19)
        .replace_one(
            &accounts,
            doc! {"_id": "account-6"},
            doc! {"_id": "account-6", "balance": 0},
        )
        .await
        .unwrap_err();
    assert_eq!(stale(&error), (20, 19));
    assert_eq!(
        account(&accounts, "account-6").await,
        doc! {"_id": "account-6", "balance": 10, "_fence": 20_i64}
    );
    // Read, change, write back: the token read is replaced by the writer's.
    let mut read = account(&accounts, "account-6").await;
    read.insert("balance", 11);
    Fence::new(21)
        .replace_one(&accounts, doc! {"_id": "account-6"}, read)
        .await
        .unwrap();
    assert_eq!(
        account(&accounts, "account-6").await,
        doc! {"_id": "account-6", "balance": 11, "_fence": 21_i64}
    );
}

#[tokio::test]
async fn an_upsert_over_a_newer_token_is_stale_not_a_duplicate_key() {
    let env = env("fenced_upsert").await;
    let accounts: Collection<Document> = env.db.collection("accounts");
    let filter = doc! {"_id": "account-7"};
    // No document: the upsert inserts it, with the token.
    let inserted = Fence::new(30)
        .update_one(&accounts, filter.clone(), doc! {"$set": {"balance": 1}})
        .upsert(true)
        .await
        .unwrap();
    assert_eq!(inserted.upserted_id, Some(Bson::from("account-7")));
    assert_eq!(
        account(&accounts, "account-7").await,
        doc! {"_id": "account-7", "balance": 1, "_fence": 30_i64}
    );
    // An older token: the filter refuses the document, the insert meets its `_id`.
    let error = Fence::new(29)
        .update_one(&accounts, filter.clone(), doc! {"$set": {"balance": 2}})
        .upsert(true)
        .await
        .unwrap_err();
    assert_eq!(stale(&error), (30, 29));
    let error = Fence::new(29)
        .update_one(
            &accounts,
            filter.clone(),
            vec![doc! {"$set": {"balance": 2}}],
        )
        .upsert(true)
        .await
        .unwrap_err();
    assert_eq!(stale(&error), (30, 29));
    let error = Fence::new(29)
        .replace_one(
            &accounts,
            filter.clone(),
            doc! {"_id": "account-7", "balance": 2},
        )
        .upsert(true)
        .await
        .unwrap_err();
    assert_eq!(stale(&error), (30, 29));
    // A newer token updates it in place.
    let updated = Fence::new(31)
        .replace_one(
            &accounts,
            filter.clone(),
            doc! {"_id": "account-7", "balance": 3},
        )
        .upsert(true)
        .await
        .unwrap();
    assert_eq!((updated.matched_count, updated.upserted_id), (1, None));
    assert_eq!(
        account(&accounts, "account-7").await,
        doc! {"_id": "account-7", "balance": 3, "_fence": 31_i64}
    );
}

#[tokio::test]
async fn a_missing_document_is_not_stale_and_a_write_costs_a_read_only_when_refused() {
    let env = env("fenced_missing").await;
    let (monitor, db) = env.monitored().await;
    let accounts: Collection<Document> = db.collection("accounts");
    let fence = Fence::new(40);
    let update = || doc! {"$set": {"balance": 1}};
    monitor.clear();
    let missing = fence
        .update_one(&accounts, doc! {"_id": "nobody"}, update())
        .await
        .unwrap();
    assert_eq!((missing.matched_count, missing.upserted_id), (0, None));
    assert_eq!(monitor.take_names(), ["update", "find"]);
    assert_eq!(accounts.count_documents(doc! {}).await.unwrap(), 0);

    fence
        .update_one(&accounts, doc! {"_id": "account-8"}, update())
        .upsert(true)
        .await
        .unwrap();
    monitor.clear();
    fence
        .update_one(&accounts, doc! {"_id": "account-8"}, update())
        .await
        .unwrap();
    assert_eq!(monitor.take_names(), ["update"], "no read when not refused");
    Fence::new(39)
        .update_one(&accounts, doc! {"_id": "account-8"}, update())
        .await
        .unwrap_err();
    assert_eq!(monitor.take_names(), ["update", "find"]);
}

#[tokio::test]
async fn a_field_of_your_choice_and_tokens_stored_by_other_drivers() {
    let env = env("fenced_field").await;
    let accounts: Collection<Document> = env.db.collection("accounts");
    let fence = Fence::new(60).field("version").unwrap();
    fence
        .update_one(&accounts, doc! {"_id": "a"}, doc! {"$set": {"x": 1}})
        .upsert(true)
        .await
        .unwrap();
    assert_eq!(
        account(&accounts, "a").await,
        doc! {"_id": "a", "x": 1, "version": 60_i64}
    );
    let error = Fence::new(59)
        .field("version")
        .unwrap()
        .update_one(&accounts, doc! {"_id": "a"}, doc! {"$set": {"x": 2}})
        .await
        .unwrap_err();
    assert_eq!(stale(&error), (60, 59));

    // A token stored as a 32-bit integer or a double compares as a number.
    accounts
        .insert_many([
            doc! {"_id": "int", "_fence": 100_i32},
            doc! {"_id": "double", "_fence": 100.0},
            doc! {"_id": "text", "_fence": "100"},
        ])
        .await
        .unwrap();
    for id in ["int", "double"] {
        let error = Fence::new(99)
            .update_one(&accounts, doc! {"_id": id}, doc! {})
            .await
            .unwrap_err();
        assert_eq!(stale(&error), (100, 99), "{id}");
        let written = Fence::new(100)
            .update_one(&accounts, doc! {"_id": id}, doc! {})
            .await
            .unwrap_or_else(|e| panic!("{id}: {e:?}"));
        assert_eq!(written.matched_count, 1, "{id}: an equal token is admitted");
    }
    // Something else in the field: not a token, and nothing is written.
    let error = Fence::new(99)
        .update_one(&accounts, doc! {"_id": "text"}, doc! {"$set": {"x": 1}})
        .await
        .unwrap_err();
    assert!(
        matches!(error.kind(), ErrorKind::UnexpectedDocument { .. }),
        "{error:?}"
    );
    assert_eq!(
        account(&accounts, "text").await,
        doc! {"_id": "text", "_fence": "100"}
    );
}

#[tokio::test]
async fn multi_guards_fence_each_resource_with_its_own_token() {
    let env = env("fenced_multi").await;
    let accounts: Collection<Document> = env.db.collection("accounts");
    let both = env.locks.multi(["from", "to"]).acquire().await.unwrap();
    for (resource, delta) in [("from", -5), ("to", 5)] {
        let fence = both.fence(resource).expect("a member");
        assert_eq!(Some(fence.token()), both.fencing_token(resource));
        fence
            .update_one(
                &accounts,
                doc! {"_id": resource},
                doc! {"$inc": {"balance": delta}},
            )
            .upsert(true)
            .await
            .unwrap();
        assert_eq!(
            account(&accounts, resource)
                .await
                .get_i64("_fence")
                .unwrap(),
            fence.token()
        );
    }
    assert!(both.fence("elsewhere").is_none());
    both.release().await.unwrap();
}

#[tokio::test]
async fn bad_field_names_and_updates_are_invalid_arguments_and_send_nothing() {
    let env = env("fenced_bad_input").await;
    for bad in ["", "$fence", "meta.fence", "_id", "fen\0ce"] {
        let error = Fence::new(1).field(bad).unwrap_err();
        assert_eq!(invalid_argument(&error), "field", "{bad:?}");
    }
    let (monitor, db) = env.monitored().await;
    let accounts: Collection<Document> = db.collection("accounts");
    monitor.clear();
    let fence = Fence::new(1);
    for update in [
        doc! {"$set": {"_fence": 2_i64}},
        doc! {"$inc": {"_fence": 1}},
        doc! {"$unset": {"_fence": ""}},
        doc! {"$max": {"_fence.at": 1}},
        doc! {"$rename": {"old": "_fence"}},
        doc! {"balance": 1},
    ] {
        let error = fence
            .update_one(&accounts, doc! {"_id": 1}, update.clone())
            .upsert(true)
            .await
            .unwrap_err();
        assert_eq!(invalid_argument(&error), "update", "{update}");
    }
    let error = fence
        .replace_one(&accounts, doc! {"_id": 1}, doc! {"$set": {"balance": 1}})
        .upsert(true)
        .await
        .unwrap_err();
    assert_eq!(invalid_argument(&error), "replacement");
    assert!(monitor.take_names().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn a_field_holding_anything_but_a_number_refuses_fenced_writes() {
    let env = env("fenced_not_a_number").await;
    let accounts: Collection<Document> = env.db.collection("accounts");
    // Left by other writers. An array is not a token, whatever its elements: a query
    // compares each element, so `[1, 1000]` and `[1]` must not pass for "not newer".
    let others = [
        ("array", Bson::from(vec![Bson::Int64(1), Bson::Int64(1000)])),
        ("one element", Bson::from(vec![Bson::Int32(1)])),
        ("empty array", Bson::Array(Vec::new())),
        (
            "nested array",
            Bson::from(vec![Bson::from(vec![Bson::Int32(1)])]),
        ),
        ("text", Bson::from("1")),
        ("document", Bson::from(doc! {"token": 1})),
        ("null", Bson::Null),
        ("boolean", Bson::Boolean(true)),
        ("date", Bson::DateTime(bson::DateTime::from_millis(1))),
    ];
    for (id, stored) in &others {
        accounts
            .insert_one(doc! {"_id": *id, "balance": 1, "_fence": stored.clone()})
            .await
            .unwrap();
    }
    let fence = Fence::new(5);
    let mut admitted = Vec::new();
    for (id, stored) in &others {
        let filter = doc! {"_id": *id};
        let refusals = [
            fence
                .update_one(&accounts, filter.clone(), doc! {"$set": {"balance": 2}})
                .await,
            fence
                .update_one(&accounts, filter.clone(), doc! {"$set": {"balance": 2}})
                .upsert(true)
                .await,
            fence
                .update_one(
                    &accounts,
                    filter.clone(),
                    vec![doc! {"$set": {"balance": 2}}],
                )
                .await,
            fence
                .replace_one(&accounts, filter.clone(), doc! {"_id": *id, "balance": 2})
                .upsert(true)
                .await,
        ];
        for (write, refused) in refusals.into_iter().enumerate() {
            match refused {
                Ok(result) => admitted.push(format!("{id}, write {write}: {result:?}")),
                Err(error) => assert!(
                    matches!(error.kind(), ErrorKind::UnexpectedDocument { .. }),
                    "{id}, write {write}: {error:?}"
                ),
            }
        }
        let now = account(&accounts, id).await;
        if now != doc! {"_id": *id, "balance": 1, "_fence": stored.clone()} {
            admitted.push(format!("{id}: now {now}"));
        }
    }
    assert!(admitted.is_empty(), "written: {admitted:#?}");
    // A document without the field is one never fenced: the first write is admitted.
    accounts
        .insert_one(doc! {"_id": "missing", "balance": 1})
        .await
        .unwrap();
    let written = fence
        .update_one(
            &accounts,
            doc! {"_id": "missing"},
            doc! {"$set": {"balance": 2}},
        )
        .await
        .unwrap();
    assert_eq!(written.modified_count, 1);
    assert_eq!(
        account(&accounts, "missing")
            .await
            .get_i64("_fence")
            .unwrap(),
        5
    );
}
