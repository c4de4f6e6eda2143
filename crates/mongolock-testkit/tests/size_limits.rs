//! BSON size limits as MongoDB 7.0 enforces them: stored documents up to `maxBsonObjectSize`
//! (16 MiB), command bodies up to 16 MiB + 16 KiB, messages up to `maxMessageSizeBytes`
//! (48,000,000). Each path refuses with the code mongod uses there.

mod common;

use bson::{Bson, Document, doc};
use mongolock_testkit::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MAX_BSON_OBJECT_SIZE: usize = 16 * 1024 * 1024;
const MAX_INTERNAL_SIZE: usize = MAX_BSON_OBJECT_SIZE + 16 * 1024;

fn size(doc: &Document) -> usize {
    bson::to_vec(doc).unwrap().len()
}

/// `{_id: id, s: "xxx..."}` of exactly `total` bytes.
fn sized(id: impl Into<Bson>, total: usize) -> Document {
    let mut doc = doc! {"_id": id.into(), "s": ""};
    let overhead = size(&doc);
    doc.insert("s", "x".repeat(total - overhead));
    assert_eq!(size(&doc), total);
    doc
}

#[tokio::test]
async fn hello_advertises_the_limits_that_are_enforced() {
    let t = common::target("size_hello").await;
    let hello = t.db.run_command(doc! {"hello": 1}).await.unwrap();
    assert_eq!(hello.get_i32("maxBsonObjectSize"), Ok(16_777_216));
    assert_eq!(hello.get_i32("maxMessageSizeBytes"), Ok(48_000_000));
    // The advertised object size is a real limit: one byte more is refused.
    let reply =
        t.db.run_command(doc! {"insert": "c", "documents": [sized(1, MAX_BSON_OBJECT_SIZE + 1)]})
            .await
            .unwrap();
    assert_eq!(reply.get_i32("n"), Ok(0), "{:?}", reply.get("writeErrors"));
}

#[tokio::test]
async fn inserts_take_documents_up_to_16_mib_and_refuse_one_byte_more_with_bad_value() {
    let t = common::target("size_insert").await;
    let coll = t.coll("c");
    // Two documents of exactly 16 MiB travel in one document sequence of one message.
    let result = coll
        .insert_many(vec![
            sized(1, MAX_BSON_OBJECT_SIZE),
            sized(2, MAX_BSON_OBJECT_SIZE),
        ])
        .await
        .unwrap();
    assert_eq!(result.inserted_ids.len(), 2);
    // The driver itself refuses larger documents, so this one goes in the command body, which
    // may be up to 16 MiB + 16 KiB: mongod's fixDocumentForInsert refuses it (BadValue).
    let reply =
        t.db.run_command(doc! {
            "insert": "c",
            "documents": [sized(3, MAX_BSON_OBJECT_SIZE + 1), {"_id": 4}],
            "ordered": false,
        })
        .await
        .unwrap();
    assert_eq!(reply.get_i32("n"), Ok(1), "{:?}", reply.get("writeErrors"));
    let errors = reply.get_array("writeErrors").unwrap();
    assert_eq!(errors.len(), 1);
    let error = errors[0].as_document().unwrap();
    assert_eq!(error.get_i32("index"), Ok(0));
    assert_eq!(error.get_i32("code"), Ok(2));
    assert_eq!(
        error.get_str("errmsg"),
        Ok("object to insert too large. size in bytes: 16777217, max size: 16777216")
    );
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 3);
}

#[tokio::test]
async fn an_update_that_grows_a_document_past_16_mib_is_refused_and_changes_nothing() {
    let t = common::target("size_update").await;
    let coll = t.coll("c");
    coll.insert_one(sized(1, MAX_BSON_OBJECT_SIZE - 1000))
        .await
        .unwrap();
    // Just over 16 MiB: the update stage's own check, 17419.
    let err = coll
        .update_one(doc! {"_id": 1}, doc! {"$set": {"t": "y".repeat(2000)}})
        .await
        .unwrap_err();
    let (code, message) = common::command_error(&err);
    assert_eq!(code, 17419);
    assert_eq!(
        message,
        "Resulting document after update is larger than 16777216"
    );
    // Over 16 MiB + 16 KiB mongod cannot even build the new document: 10334.
    let err = coll
        .update_one(doc! {"_id": 1}, doc! {"$set": {"t": "y".repeat(20_000)}})
        .await
        .unwrap_err();
    let (code, message) = common::command_error(&err);
    assert_eq!(code, 10334);
    assert_eq!(
        message,
        "BSONObj size: 16796224 (0x1004A40) is invalid. Size must be between 0 and \
         16793600(16MB) First element: _id: 1"
    );
    // findAndModify goes through the same update stage; its error is the command's.
    let err = coll
        .find_one_and_update(doc! {"_id": 1}, doc! {"$set": {"t": "y".repeat(2000)}})
        .await
        .unwrap_err();
    assert_eq!(common::command_error(&err).0, 17419);
    // A pipeline update is checked the same way.
    let err = coll
        .update_one(
            doc! {"_id": 1},
            vec![doc! {"$set": {"t": "y".repeat(2000)}}],
        )
        .await
        .unwrap_err();
    assert_eq!(common::command_error(&err).0, 17419);
    let stored = coll.find_one(doc! {"_id": 1}).await.unwrap().unwrap();
    assert!(!stored.contains_key("t"), "nothing was written");
    // An update that stays within the limit still works.
    let result = coll
        .update_one(doc! {"_id": 1}, doc! {"$set": {"t": "y".repeat(900)}})
        .await
        .unwrap();
    assert_eq!(result.modified_count, 1);
}

#[tokio::test]
async fn an_upsert_whose_new_document_is_over_16_mib_is_refused() {
    let t = common::target("size_upsert").await;
    let coll = t.coll("c");
    let half = "z".repeat(MAX_BSON_OBJECT_SIZE / 2);
    let expected = doc! {"_id": "new", "a": half.clone(), "b": half.clone()};
    assert!((MAX_BSON_OBJECT_SIZE + 1..=MAX_INTERNAL_SIZE).contains(&size(&expected)));
    let pipeline = vec![doc! {"$set": {"a": half}}, doc! {"$set": {"b": "$a"}}];
    let err = coll
        .update_one(doc! {"_id": "new"}, pipeline.clone())
        .upsert(true)
        .await
        .unwrap_err();
    let (code, message) = common::command_error(&err);
    assert_eq!(code, 17420);
    assert_eq!(message, "Document to upsert is larger than 16777216");
    let err = coll
        .find_one_and_update(doc! {"_id": "new"}, pipeline)
        .upsert(true)
        .await
        .unwrap_err();
    assert_eq!(common::command_error(&err).0, 17420);
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 0);
}

#[tokio::test]
async fn a_command_body_over_16_mib_plus_16_kib_is_bson_object_too_large() {
    let t = common::target("size_body").await;
    let big = sized(1, MAX_INTERNAL_SIZE);
    let err =
        t.db.run_command(doc! {"insert": "c", "documents": [big]})
            .await
            .unwrap_err();
    let (code, message) = common::command_error(&err);
    assert_eq!(code, 10334);
    // The body's size includes what the driver adds ($db, lsid, $clusterTime).
    let stated: usize = message
        .strip_prefix("BSONObj size: ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{message}"));
    assert!(stated > MAX_INTERNAL_SIZE, "{message}");
    assert!(
        message.contains(&format!(
            "(0x{stated:X}) is invalid. Size must be between 0 and 16793600(16MB)"
        )),
        "{message}"
    );
    assert!(
        message.ends_with("First element: insert: \"c\""),
        "{message}"
    );
    assert_eq!(t.coll("c").count_documents(doc! {}).await.unwrap(), 0);
    // The connection is still good.
    t.db.run_command(doc! {"ping": 1}).await.unwrap();
}

// Raw sockets: the driver refuses to send what these tests send.

fn op_msg(request_id: i32, command: &Document, sequence: Option<(&str, &[Document])>) -> Vec<u8> {
    let mut body = 0u32.to_le_bytes().to_vec();
    body.push(0);
    body.extend(bson::to_vec(command).unwrap());
    if let Some((name, docs)) = sequence {
        let mut section = name.as_bytes().to_vec();
        section.push(0);
        for doc in docs {
            section.extend(bson::to_vec(doc).unwrap());
        }
        body.push(1);
        body.extend(((section.len() + 4) as i32).to_le_bytes());
        body.extend(section);
    }
    let mut out = ((16 + body.len()) as i32).to_le_bytes().to_vec();
    out.extend(request_id.to_le_bytes());
    out.extend(0i32.to_le_bytes());
    out.extend(2013i32.to_le_bytes());
    out.extend(body);
    out
}

/// The next reply's body, or `None` when the server closed the connection.
async fn reply(stream: &mut TcpStream) -> Option<Document> {
    let mut header = [0u8; 16];
    stream.read_exact(&mut header).await.ok()?;
    let length = i32::from_le_bytes(header[0..4].try_into().unwrap()) as usize;
    let mut body = vec![0u8; length - 16];
    stream.read_exact(&mut body).await.ok()?;
    Some(Document::from_reader(&body[5..]).unwrap())
}

#[tokio::test]
async fn emulator_only_a_sequence_document_over_16_mib_plus_16_kib_is_refused_with_a_reply() {
    let server = TestServer::start().await.unwrap();
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    let insert = doc! {"insert": "c", "$db": "size_seq"};
    let docs = [doc! {"_id": 0}, sized(1, MAX_INTERNAL_SIZE + 1)];
    stream
        .write_all(&op_msg(1, &insert, Some(("documents", &docs))))
        .await
        .unwrap();
    let answer = reply(&mut stream)
        .await
        .expect("an error reply, not a closed socket");
    assert_eq!(answer.get_i32("code"), Ok(10334), "{answer}");
    assert_eq!(answer.get_str("codeName"), Ok("BSONObjectTooLarge"));
    assert!(
        answer
            .get_str("errmsg")
            .unwrap()
            .starts_with("BSONObj size: 16793601 (0x1004001) is invalid. Size must be between 0 and 16793600(16MB) First element: _id: 1"),
        "{answer}"
    );
    // Nothing was inserted (not even the valid first document) and the connection is usable.
    let count = doc! {"count": "c", "$db": "size_seq"};
    stream.write_all(&op_msg(2, &count, None)).await.unwrap();
    let answer = reply(&mut stream).await.unwrap();
    assert_eq!(answer.get_i32("n"), Ok(0), "{answer}");
}

#[tokio::test]
async fn emulator_only_a_message_over_max_message_size_closes_only_its_own_connection() {
    let server = TestServer::start().await.unwrap();
    let client = server.client();
    client
        .database("admin")
        .run_command(doc! {"ping": 1})
        .await
        .unwrap();
    for length in [48_000_001i32, i32::MAX, -1, 15] {
        let mut stream = TcpStream::connect(server.addr()).await.unwrap();
        // Only the header: the server must not wait for (or allocate) the announced body.
        let mut header = length.to_le_bytes().to_vec();
        header.extend(1i32.to_le_bytes());
        header.extend(0i32.to_le_bytes());
        header.extend(2013i32.to_le_bytes());
        stream.write_all(&header).await.unwrap();
        let mut byte = [0u8; 1];
        let read = stream.read(&mut byte).await;
        assert!(
            matches!(read, Ok(0) | Err(_)),
            "length {length}: the connection is closed without a reply"
        );
    }
    // A message of exactly the advertised maximum is read; the server and its other
    // connections carry on.
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    let ping = doc! {"ping": 1, "$db": "admin"};
    let mut filler = sized(0, 1000);
    let mut message = op_msg(3, &ping, Some(("filler", std::slice::from_ref(&filler))));
    let missing = 48_000_000 - message.len();
    filler = sized(0, 1000 + missing);
    message = op_msg(3, &ping, Some(("filler", std::slice::from_ref(&filler))));
    assert_eq!(message.len(), 48_000_000);
    stream.write_all(&message).await.unwrap();
    let answer = reply(&mut stream).await.expect("a reply");
    // The sequence's document is over 16 MiB + 16 KiB, so the reply is mongod's error.
    assert_eq!(answer.get_i32("code"), Ok(10334), "{answer}");
    client
        .database("admin")
        .run_command(doc! {"ping": 1})
        .await
        .unwrap();
}
