//! The replica set below the driver, over raw sockets: the streamed (exhaust) `hello` a
//! monitor gets from a member, and a read on a secondary that did not opt in.

use std::time::{Duration, Instant};

use bson::{Document, doc};
use mongolock_testkit::ReplicaSet;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const OP_MSG: i32 = 2013;
const MORE_TO_COME: u32 = 1 << 1;
const EXHAUST_ALLOWED: u32 = 1 << 16;

fn op_msg(request_id: i32, flags: u32, command: &Document) -> Vec<u8> {
    let mut body = flags.to_le_bytes().to_vec();
    body.push(0);
    command.to_writer(&mut body).unwrap();
    let mut out = Vec::new();
    out.extend_from_slice(&((16 + body.len()) as i32).to_le_bytes());
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(&OP_MSG.to_le_bytes());
    out.extend(body);
    out
}

/// One OP_MSG reply: its id, `responseTo`, flags and body.
async fn read_reply(stream: &mut TcpStream) -> (i32, i32, u32, Document) {
    let mut header = [0u8; 16];
    stream.read_exact(&mut header).await.unwrap();
    let length = i32::from_le_bytes(header[0..4].try_into().unwrap()) as usize;
    let id = i32::from_le_bytes(header[4..8].try_into().unwrap());
    let response_to = i32::from_le_bytes(header[8..12].try_into().unwrap());
    let mut body = vec![0u8; length - 16];
    stream.read_exact(&mut body).await.unwrap();
    let flags = u32::from_le_bytes(body[0..4].try_into().unwrap());
    (
        id,
        response_to,
        flags,
        Document::from_reader(&body[5..]).unwrap(),
    )
}

async fn connect(set: &ReplicaSet, index: usize) -> TcpStream {
    TcpStream::connect(set.member(index).addr()).await.unwrap()
}

/// The streaming protocol (`[spec] source/server-discovery-and-monitoring/server-monitoring.md`,
/// "Streaming Protocol"; mongod's `CmdHello` in `src/mongo/db/repl/replication_info.cpp` sets
/// the next invocation of an exhaust `hello` to the same command with its current
/// `topologyVersion`, so its replies stream with `moreToCome`): the first reply comes at
/// once for an older `topologyVersion`, the next one only when the member's topology
/// changes (here, a step-down), each answering the previous reply's id.
#[tokio::test]
async fn an_awaitable_hello_with_exhaust_allowed_streams_a_reply_per_topology_change() {
    let set = ReplicaSet::builder().members(3).start().await.unwrap();
    let mut stream = connect(&set, 0).await;
    let first_hello = doc! {"hello": 1, "$db": "admin"};
    stream.write_all(&op_msg(1, 0, &first_hello)).await.unwrap();
    let (_, _, _, reply) = read_reply(&mut stream).await;
    let version = reply.get_document("topologyVersion").unwrap().clone();
    let awaitable = doc! {
        "hello": 1, "$db": "admin", "topologyVersion": version.clone(),
        "maxAwaitTimeMS": 10_000_i64,
    };
    stream
        .write_all(&op_msg(2, EXHAUST_ALLOWED, &awaitable))
        .await
        .unwrap();
    // Nothing changes: no reply within a short while.
    let waited = tokio::time::timeout(Duration::from_millis(200), read_reply(&mut stream)).await;
    assert!(waited.is_err(), "a reply came without a topology change");
    let stepping = Instant::now();
    set.client()
        .database("admin")
        .run_command(doc! {"replSetStepDown": 30})
        .await
        .unwrap();
    let (id, response_to, flags, reply) = read_reply(&mut stream).await;
    assert!(stepping.elapsed() < Duration::from_secs(5));
    assert_eq!(response_to, 2);
    assert_ne!(
        flags & MORE_TO_COME,
        0,
        "a streamed reply carries moreToCome"
    );
    assert!(!reply.get_bool("isWritablePrimary").unwrap());
    let counter = reply
        .get_document("topologyVersion")
        .unwrap()
        .get_i64("counter")
        .unwrap();
    assert!(counter > version.get_i64("counter").unwrap());
    // The next one answers that reply, when the topology changes again.
    set.stop(2);
    let (_, next_response_to, next_flags, _) = read_reply(&mut stream).await;
    assert_eq!(next_response_to, id);
    assert_ne!(next_flags & MORE_TO_COME, 0);
    set.shutdown().await;
}

/// A read on a secondary without a read preference other than `primary` fails
/// `NotPrimaryNoSecondaryOk` (13435) "not primary and secondaryOk=false", with the member's
/// `topologyVersion` (`src/mongo/db/service_entry_point_common.cpp`); with
/// `$readPreference: {mode: "secondaryPreferred"}` it runs.
#[tokio::test]
async fn a_read_on_a_secondary_needs_a_read_preference() {
    let set = ReplicaSet::builder().members(3).start().await.unwrap();
    let mut stream = connect(&set, 1).await;
    let find = doc! {"find": "c", "$db": "d"};
    stream.write_all(&op_msg(1, 0, &find)).await.unwrap();
    let (_, _, _, reply) = read_reply(&mut stream).await;
    assert_eq!(reply.get_i32("code").unwrap(), 13435, "{reply}");
    assert_eq!(
        reply.get_str("codeName").unwrap(),
        "NotPrimaryNoSecondaryOk"
    );
    assert_eq!(
        reply.get_str("errmsg").unwrap(),
        "not primary and secondaryOk=false"
    );
    assert!(reply.get_document("topologyVersion").is_ok());
    let opted_in =
        doc! {"find": "c", "$db": "d", "$readPreference": {"mode": "secondaryPreferred"}};
    stream.write_all(&op_msg(2, 0, &opted_in)).await.unwrap();
    let (_, _, _, reply) = read_reply(&mut stream).await;
    assert_eq!(reply.get_f64("ok").unwrap(), 1.0, "{reply}");
    set.shutdown().await;
}
