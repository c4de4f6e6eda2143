//! A long-running command does not stall the server: while one connection runs a heavy
//! multi-document pipeline update (or a heavy aggregation), other connections are still
//! answered, the handshake and heartbeats included.
//!
//! These tests run on tokio's current-thread runtime, the harshest setup: the emulator, the
//! driver and the test share one thread, so a command that ran on it would hold up
//! everything else until it finished. Progress is observed through ordering, not timing:
//! the heavy update's first change event proves it has started on the server, and a ping
//! answered before the update's own future completes proves the server kept serving.

mod common;

use bson::{Document, doc};
use futures_util::StreamExt;

const DOCUMENTS: i32 = 4000;

/// A pipeline that does real work for every document.
fn heavy_pipeline() -> Vec<Document> {
    vec![
        doc! {"$set": {
            "squares": {"$map": {"input": "$values", "in": {"$multiply": ["$$this", "$$this"]}}},
        }},
        doc! {"$set": {
            "total": {"$sum": "$squares"},
            "label": {"$concat": ["doc-", {"$toString": "$n"}]},
            "evens": {"$filter": {"input": "$squares", "cond": {"$eq": [{"$mod": ["$$this", 2]}, 0]}}},
        }},
        doc! {"$set": {"touched": {"$add": ["$total", 1]}}},
    ]
}

async fn fill(coll: &mongodb::Collection<Document>) {
    let docs: Vec<Document> = (0..DOCUMENTS)
        .map(|n| doc! {"_id": n, "n": n, "values": (0..40).map(|v| v + n).collect::<Vec<i32>>()})
        .collect();
    coll.insert_many(docs).await.unwrap();
}

/// A second client with its own connections (and its own monitor).
async fn other_client(t: &common::Target) -> mongodb::Client {
    let client = match &t.server {
        Some(server) => server.new_client(),
        None => mongodb::Client::with_uri_str(std::env::var("MONGODB_URI").unwrap())
            .await
            .unwrap(),
    };
    // Connect and shake hands before the heavy command starts.
    client
        .database("admin")
        .run_command(doc! {"ping": 1})
        .await
        .unwrap();
    client
}

/// Pings (and hellos) from `client` until `heavy` finishes; returns how many were answered
/// while it was still running.
async fn answered_while_running<T>(
    client: &mongodb::Client,
    heavy: &tokio::task::JoinHandle<T>,
) -> usize {
    let admin = client.database("admin");
    let mut answered = 0;
    for round in 0.. {
        let command = if round % 2 == 0 {
            doc! {"ping": 1}
        } else {
            doc! {"hello": 1}
        };
        admin.run_command(command).await.unwrap();
        if heavy.is_finished() {
            break;
        }
        answered += 1;
        if answered == 5 {
            break;
        }
    }
    answered
}

#[tokio::test]
async fn pings_are_answered_while_a_heavy_pipeline_update_runs() {
    let t = common::target("heavy_update").await;
    let coll = t.coll("c");
    fill(&coll).await;
    let other = other_client(&t).await;
    let mut events = coll.watch().await.unwrap();
    let heavy = tokio::spawn({
        let coll = coll.clone();
        async move { coll.update_many(doc! {}, heavy_pipeline()).await }
    });
    // The first update event: the heavy command is running on the server.
    let first = events.next().await.unwrap().unwrap();
    assert_eq!(
        first.operation_type,
        mongodb::change_stream::event::OperationType::Update
    );
    let answered = answered_while_running(&other, &heavy).await;
    let result = heavy.await.unwrap().unwrap();
    assert_eq!(result.modified_count, DOCUMENTS as u64);
    assert!(
        answered > 0,
        "no ping was answered while the heavy update was running"
    );
    // Every document was updated once, completely.
    let done = coll
        .count_documents(doc! {"touched": {"$exists": true}, "label": {"$exists": true}})
        .await
        .unwrap();
    assert_eq!(done, DOCUMENTS as u64);
}

#[tokio::test]
async fn emulator_only_a_command_waiting_for_a_busy_collection_does_not_stall_the_server() {
    let server = mongolock_testkit::TestServer::start().await.unwrap();
    let coll = server
        .client()
        .database("heavy_wait")
        .collection::<Document>("c");
    fill(&coll).await;
    let mut events = coll.watch().await.unwrap();
    let heavy = tokio::spawn({
        let coll = coll.clone();
        async move { coll.update_many(doc! {}, heavy_pipeline()).await }
    });
    events.next().await.unwrap().unwrap();
    // A second command on the busy collection waits for the collection lock, which the
    // heavy update holds to its end (so it counts every document updated); meanwhile a
    // third connection is answered.
    let waiting = tokio::spawn({
        let coll = server
            .new_client()
            .database("heavy_wait")
            .collection::<Document>("c");
        async move {
            coll.count_documents(doc! {"touched": {"$exists": true}})
                .await
        }
    });
    let third = server.new_client();
    let answered = answered_while_running(&third, &heavy).await;
    heavy.await.unwrap().unwrap();
    assert_eq!(waiting.await.unwrap().unwrap(), DOCUMENTS as u64);
    assert!(
        answered > 0,
        "no ping was answered while the collection was busy"
    );
}
