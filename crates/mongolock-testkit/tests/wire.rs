//! The wire protocol below the driver: OP_MSG flags and sections, checksums, `moreToCome`,
//! and the legacy OP_QUERY handshake, over raw sockets.

use bson::{Document, doc};
use mongolock_testkit::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const OP_MSG: i32 = 2013;
const OP_QUERY: i32 = 2004;
const OP_REPLY: i32 = 1;

fn bson_bytes(doc: &Document) -> Vec<u8> {
    let mut out = Vec::new();
    doc.to_writer(&mut out).unwrap();
    out
}

fn message(request_id: i32, op_code: i32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&((16 + body.len()) as i32).to_le_bytes());
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(&op_code.to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// An OP_MSG with a command section and optional document sequences.
fn op_msg(
    request_id: i32,
    flags: u32,
    command: &Document,
    sequences: &[(&str, Vec<Document>)],
) -> Vec<u8> {
    let mut body = flags.to_le_bytes().to_vec();
    body.push(0);
    body.extend(bson_bytes(command));
    for (name, docs) in sequences {
        let mut section = Vec::new();
        section.extend_from_slice(name.as_bytes());
        section.push(0);
        for doc in docs {
            section.extend(bson_bytes(doc));
        }
        body.push(1);
        body.extend_from_slice(&((section.len() + 4) as i32).to_le_bytes());
        body.extend(section);
    }
    if flags & 1 != 0 {
        // The checksum covers the whole message, header included, with the final length.
        let mut whole = message(request_id, OP_MSG, &body);
        let length = (whole.len() + 4) as i32;
        whole[0..4].copy_from_slice(&length.to_le_bytes());
        let crc = crc32c(&whole);
        whole.extend_from_slice(&crc.to_le_bytes());
        return whole;
    }
    message(request_id, OP_MSG, &body)
}

/// CRC-32C (Castagnoli), bit by bit: slow and obviously right, for the test only.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Reads one reply: its opcode, `responseTo` and body document.
async fn read_reply(stream: &mut TcpStream) -> Option<(i32, i32, Document)> {
    let mut header = [0u8; 16];
    stream.read_exact(&mut header).await.ok()?;
    let length = i32::from_le_bytes(header[0..4].try_into().unwrap()) as usize;
    let response_to = i32::from_le_bytes(header[8..12].try_into().unwrap());
    let op_code = i32::from_le_bytes(header[12..16].try_into().unwrap());
    let mut body = vec![0u8; length - 16];
    stream.read_exact(&mut body).await.ok()?;
    let doc_start = match op_code {
        OP_MSG => 5,    // flags + section kind
        OP_REPLY => 20, // flags, cursor id, starting from, number returned
        other => panic!("unexpected opcode {other}"),
    };
    Some((
        op_code,
        response_to,
        Document::from_reader(&body[doc_start..]).unwrap(),
    ))
}

async fn connect(server: &TestServer) -> TcpStream {
    TcpStream::connect(server.addr()).await.unwrap()
}

#[tokio::test]
async fn document_sequences_are_merged_into_the_command() {
    let server = TestServer::start().await.unwrap();
    let mut stream = connect(&server).await;
    let insert = doc! {"insert": "c", "$db": "wire"};
    let docs = vec![doc! {"_id": 1}, doc! {"_id": 2}, doc! {"_id": 3}];
    stream
        .write_all(&op_msg(7, 0, &insert, &[("documents", docs)]))
        .await
        .unwrap();
    let (op, response_to, reply) = read_reply(&mut stream).await.unwrap();
    assert_eq!((op, response_to), (OP_MSG, 7));
    assert_eq!(reply.get_i32("n"), Ok(3), "{reply}");
}

#[tokio::test]
async fn a_field_sent_both_in_the_body_and_as_a_sequence_is_a_duplicate_field() {
    let server = TestServer::start().await.unwrap();
    let mut stream = connect(&server).await;
    let insert = doc! {"insert": "c", "$db": "wire", "documents": [{"_id": 1}]};
    stream
        .write_all(&op_msg(
            1,
            0,
            &insert,
            &[("documents", vec![doc! {"_id": 2}])],
        ))
        .await
        .unwrap();
    let (_, _, reply) = read_reply(&mut stream).await.unwrap();
    assert_eq!(reply.get_i32("code"), Ok(40413), "{reply}");
    let count = doc! {"count": "c", "$db": "wire"};
    stream.write_all(&op_msg(2, 0, &count, &[])).await.unwrap();
    let (_, _, reply) = read_reply(&mut stream).await.unwrap();
    assert_eq!(reply.get_i32("n"), Ok(0), "nothing was inserted");
}

#[tokio::test]
async fn checksums_are_verified() {
    let server = TestServer::start().await.unwrap();
    let mut stream = connect(&server).await;
    let ping = doc! {"ping": 1, "$db": "admin"};
    stream.write_all(&op_msg(3, 1, &ping, &[])).await.unwrap();
    let (_, response_to, reply) = read_reply(&mut stream).await.unwrap();
    assert_eq!(response_to, 3);
    assert_eq!(reply.get_f64("ok"), Ok(1.0));
    let mut corrupt = op_msg(4, 1, &ping, &[]);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xFF;
    stream.write_all(&corrupt).await.unwrap();
    assert!(
        read_reply(&mut stream).await.is_none(),
        "a bad checksum closes the connection"
    );
}

#[tokio::test]
async fn more_to_come_gets_no_reply_but_the_write_happens() {
    let server = TestServer::start().await.unwrap();
    let mut stream = connect(&server).await;
    let insert = doc! {"insert": "c", "$db": "wire", "writeConcern": {"w": 0}};
    stream
        .write_all(&op_msg(
            1,
            2,
            &insert,
            &[("documents", vec![doc! {"_id": "quiet"}])],
        ))
        .await
        .unwrap();
    stream
        .write_all(&op_msg(2, 0, &doc! {"count": "c", "$db": "wire"}, &[]))
        .await
        .unwrap();
    let (_, response_to, reply) = read_reply(&mut stream).await.unwrap();
    assert_eq!(response_to, 2, "the first reply answers the second request");
    assert_eq!(reply.get_i32("n"), Ok(1));
}

#[tokio::test]
async fn unknown_required_flag_bits_close_the_connection() {
    let server = TestServer::start().await.unwrap();
    let mut stream = connect(&server).await;
    stream
        .write_all(&op_msg(1, 1 << 5, &doc! {"ping": 1, "$db": "admin"}, &[]))
        .await
        .unwrap();
    assert!(read_reply(&mut stream).await.is_none());
}

fn op_query(request_id: i32, namespace: &str, query: &Document) -> Vec<u8> {
    let mut body = 0i32.to_le_bytes().to_vec();
    body.extend_from_slice(namespace.as_bytes());
    body.push(0);
    body.extend_from_slice(&0i32.to_le_bytes());
    body.extend_from_slice(&(-1i32).to_le_bytes());
    body.extend(bson_bytes(query));
    message(request_id, OP_QUERY, &body)
}

#[tokio::test]
async fn legacy_op_query_handshake_is_answered_with_op_reply() {
    let server = TestServer::start().await.unwrap();
    let mut stream = connect(&server).await;
    stream
        .write_all(&op_query(
            9,
            "admin.$cmd",
            &doc! {"isMaster": 1, "helloOk": true},
        ))
        .await
        .unwrap();
    let (op, response_to, reply) = read_reply(&mut stream).await.unwrap();
    assert_eq!((op, response_to), (OP_REPLY, 9));
    assert_eq!(reply.get_bool("ismaster"), Ok(true));
    assert_eq!(reply.get_bool("helloOk"), Ok(true));
    // Other commands over OP_QUERY are refused, as since MongoDB 5.1.
    stream
        .write_all(&op_query(10, "admin.$cmd", &doc! {"ping": 1}))
        .await
        .unwrap();
    let (op, _, reply) = read_reply(&mut stream).await.unwrap();
    assert_eq!(op, OP_REPLY);
    assert_eq!(reply.get_i32("code"), Ok(352), "{reply}");
    // And the same connection goes on with OP_MSG.
    stream
        .write_all(&op_msg(11, 0, &doc! {"ping": 1, "$db": "admin"}, &[]))
        .await
        .unwrap();
    let (op, _, reply) = read_reply(&mut stream).await.unwrap();
    assert_eq!((op, reply.get_f64("ok")), (OP_MSG, Ok(1.0)));
}

#[tokio::test]
async fn garbage_never_takes_the_server_down() {
    // A panicking connection task would not stop the server, so count panics as well.
    static PANICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        default_hook(info);
    }));
    let server = TestServer::start().await.unwrap();
    // A deterministic generator, so a failure can be replayed.
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let ping = doc! {"ping": 1, "$db": "admin"};
    for round in 0..200 {
        let mut stream = connect(&server).await;
        // A valid message, then one with random bytes flipped: header, flags, sections, BSON.
        let mut bytes = op_msg(
            round,
            0,
            &doc! {"insert": "c", "$db": "fuzz", "documents": [{"a": round}]},
            &[],
        );
        for _ in 0..(1 + next() % 4) {
            let at = (next() as usize) % bytes.len();
            bytes[at] = next() as u8;
        }
        let _ = stream.write_all(&bytes).await;
        let _ = stream.shutdown().await;
        drop(stream);
    }
    let mut stream = connect(&server).await;
    stream.write_all(&op_msg(1, 0, &ping, &[])).await.unwrap();
    let (_, _, reply) = read_reply(&mut stream).await.unwrap();
    assert_eq!(reply.get_f64("ok"), Ok(1.0), "the server still answers");
    assert_eq!(
        PANICS.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no task panicked"
    );
}
