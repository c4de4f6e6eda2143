//! Smoke test: the official driver connects, writes and counts.
use bson::doc;
use mongolock_testkit::TestServer;

#[tokio::test]
async fn driver_connects_inserts_and_counts() {
    let server = TestServer::start().await.unwrap();
    let db = server.client().database("smoke");
    db.run_command(doc! {"ping": 1}).await.unwrap();
    let coll = db.collection::<bson::Document>("c");
    coll.insert_one(doc! {"_id": 1, "a": 1}).await.unwrap();
    coll.insert_many(vec![doc! {"_id": 2}, doc! {"_id": 3}])
        .await
        .unwrap();
    assert_eq!(coll.estimated_document_count().await.unwrap(), 3);
    let err = coll.insert_one(doc! {"_id": 1}).await.unwrap_err();
    println!("{err:?}");
    server.shutdown().await;
}
