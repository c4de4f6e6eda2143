//! Collations: `{locale: "simple"}` (binary comparison, MongoDB's default) is accepted
//! wherever mongod accepts a collation and changes nothing; a malformed collation is refused
//! as mongod refuses it. The emulator has no ICU, so any other locale is refused too.

mod common;

use bson::{Bson, Document, doc};
use futures_util::TryStreamExt;
use mongodb::options::{Collation, IndexOptions};
use mongodb::{Collection, IndexModel};

fn simple() -> Collation {
    Collation::builder().locale("simple").build()
}

/// Mixed case, so that a locale-aware order would differ from the binary one.
async fn fill(coll: &Collection<Document>) {
    coll.insert_many(vec![
        doc! {"_id": 1, "name": "b", "k": 1},
        doc! {"_id": 2, "name": "B", "k": 1},
        doc! {"_id": 3, "name": "a", "k": 2},
        doc! {"_id": 4, "name": "A", "k": 2},
    ])
    .await
    .unwrap();
}

fn names(docs: &[Document]) -> Vec<&str> {
    docs.iter().map(|d| d.get_str("name").unwrap()).collect()
}

#[tokio::test]
async fn the_simple_collation_is_accepted_by_every_command_and_changes_nothing() {
    let t = common::target("collation_simple").await;
    let coll = t.coll("c");
    fill(&coll).await;

    // find: binary order, so upper case first; "a" matches only "a".
    let sorted: Vec<Document> = coll
        .find(doc! {})
        .sort(doc! {"name": 1})
        .collation(simple())
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(names(&sorted), ["A", "B", "a", "b"]);
    let exact = coll
        .find_one(doc! {"name": "a"})
        .collation(simple())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exact.get_i32("_id"), Ok(3));

    // aggregate (and count_documents, which is an aggregate).
    let grouped: Vec<Document> = coll
        .aggregate(vec![
            doc! {"$match": {"name": {"$gte": "a"}}},
            doc! {"$sort": {"name": 1}},
        ])
        .collation(simple())
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(names(&grouped), ["a", "b"]);
    let counted = coll
        .count_documents(doc! {"name": {"$lt": "a"}})
        .collation(simple())
        .await
        .unwrap();
    assert_eq!(counted, 2);

    // count and distinct.
    let count = t
        .db
        .run_command(doc! {"count": "c", "query": {"name": "B"}, "collation": {"locale": "simple"}})
        .await
        .unwrap();
    assert_eq!(count.get_i32("n"), Ok(1));
    let mut distinct = coll
        .distinct("name", doc! {})
        .collation(simple())
        .await
        .unwrap();
    distinct.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
    assert_eq!(
        distinct,
        vec![
            Bson::from("A"),
            Bson::from("B"),
            Bson::from("a"),
            Bson::from("b")
        ]
    );

    // findAndModify.
    let before = coll
        .find_one_and_update(doc! {"name": "b"}, doc! {"$set": {"seen": true}})
        .collation(simple())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(before.get_i32("_id"), Ok(1));

    // update statements (updates[i].collation): only the exact match changes.
    let updated = coll
        .update_many(doc! {"name": "A"}, doc! {"$inc": {"k": 10}})
        .collation(simple())
        .await
        .unwrap();
    assert_eq!((updated.matched_count, updated.modified_count), (1, 1));

    // delete statements (deletes[i].collation).
    let deleted = coll
        .delete_many(doc! {"name": "B"})
        .collation(simple())
        .await
        .unwrap();
    assert_eq!(deleted.deleted_count, 1);
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 3);

    // createIndexes: a simple collation is left out of the stored specification, so the
    // index is the same as one without a collation.
    let index = IndexModel::builder()
        .keys(doc! {"name": 1})
        .options(
            IndexOptions::builder()
                .name("name_1".to_string())
                .unique(true)
                .collation(simple())
                .build(),
        )
        .build();
    coll.create_index(index).await.unwrap();
    let again =
        t.db.run_command(doc! {
            "createIndexes": "c",
            "indexes": [{"key": {"name": 1}, "name": "name_1", "unique": true}],
        })
        .await
        .unwrap();
    assert_eq!(
        again.get_i32("numIndexesBefore"),
        again.get_i32("numIndexesAfter")
    );
    let listed: Vec<IndexModel> = coll
        .list_indexes()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let name_index = listed
        .iter()
        .find(|i| i.keys == doc! {"name": 1})
        .expect("the index exists");
    let options = name_index.options.as_ref().unwrap();
    assert!(options.collation.is_none(), "{options:?}");
    // Binary comparison: "a" and "A" are different keys of the unique index.
    coll.insert_one(doc! {"_id": 9, "name": "B"}).await.unwrap();

    // create: a collection whose default collation is simple is a plain collection.
    t.db.create_collection("d")
        .collation(simple())
        .await
        .unwrap();
    let spec =
        t.db.list_collections()
            .filter(doc! {"name": "d"})
            .await
            .unwrap()
            .try_next()
            .await
            .unwrap()
            .unwrap();
    assert!(spec.options.collation.is_none(), "{:?}", spec.options);
}

/// Runs `cmd` and returns the error code, whether it came back as a command error or as the
/// first write error.
async fn refusal(t: &common::Target, cmd: Document) -> i32 {
    let reply = match t.db.run_command(cmd.clone()).await {
        Ok(reply) => reply,
        Err(error) => return common::command_error(&error).0,
    };
    match reply.get_array("writeErrors") {
        Ok(errors) => errors[0].as_document().unwrap().get_i32("code").unwrap(),
        Err(_) => panic!("{cmd} succeeded: {reply}"),
    }
}

/// Every place a collation goes, with `collation` in it.
fn commands_with(collation: Bson) -> Vec<Document> {
    let c = collation;
    vec![
        doc! {"find": "c", "filter": {}, "collation": c.clone()},
        doc! {"aggregate": "c", "pipeline": [], "cursor": {}, "collation": c.clone()},
        doc! {"count": "c", "collation": c.clone()},
        doc! {"distinct": "c", "key": "name", "collation": c.clone()},
        doc! {"findAndModify": "c", "query": {}, "update": {"$set": {"x": 1}}, "collation": c.clone()},
        doc! {"update": "c", "updates": [{"q": {}, "u": {"$set": {"x": 1}}, "collation": c.clone()}]},
        doc! {"delete": "c", "deletes": [{"q": {}, "limit": 0, "collation": c.clone()}]},
        doc! {"createIndexes": "c", "indexes": [{"key": {"x": 1}, "name": "x_1", "collation": c.clone()}]},
        doc! {"create": "other", "collation": c},
    ]
}

#[tokio::test]
async fn a_simple_collation_with_other_fields_is_failed_to_parse_everywhere() {
    let t = common::target("collation_extra").await;
    let coll = t.coll("c");
    fill(&coll).await;
    for cmd in commands_with(Bson::Document(doc! {"locale": "simple", "strength": 2})) {
        assert_eq!(refusal(&t, cmd.clone()).await, 9, "{cmd}");
    }
    let err = coll
        .find_one(doc! {})
        .collation(
            Collation::builder()
                .locale("simple")
                .strength(mongodb::options::CollationStrength::Primary)
                .build(),
        )
        .await
        .unwrap_err();
    let (code, message) = common::command_error(&err);
    assert_eq!(code, 9);
    assert_eq!(
        message,
        "If locale=simple, no other fields should be present in: { locale: \"simple\", strength: 1 }"
    );
    assert_eq!(
        coll.count_documents(doc! {"x": 1}).await.unwrap(),
        0,
        "nothing was written"
    );
}

#[tokio::test]
async fn emulator_only_other_collations_are_refused_everywhere() {
    let server = mongolock_testkit::TestServer::start().await.unwrap();
    let client = server.client();
    let t = common::Target {
        db: client.database("collation_other"),
        client,
        server: Some(server),
    };
    fill(&t.coll("c")).await;
    let refused = [
        Bson::Document(doc! {"locale": "en"}),
        Bson::Document(doc! {"locale": "en_US", "strength": 2}),
        Bson::String("simple".into()),
        Bson::Document(doc! {"strength": 1}),
    ];
    for collation in refused {
        let expected = match &collation {
            Bson::Document(d) if d.contains_key("locale") => 72,
            Bson::Document(_) => 40414,
            _ => 14,
        };
        for cmd in commands_with(collation.clone()) {
            assert_eq!(refusal(&t, cmd.clone()).await, expected, "{cmd}");
        }
    }
    let err = t
        .coll("c")
        .find_one(doc! {})
        .collation(Collation::builder().locale("fr").build())
        .await
        .unwrap_err();
    let (code, message) = common::command_error(&err);
    assert_eq!(code, 72);
    assert!(
        message.contains("not supported by this emulator"),
        "{message}"
    );
    let indexes: Vec<String> = t.coll("c").list_index_names().await.unwrap();
    assert_eq!(indexes, ["_id_"], "no index was created");
}
