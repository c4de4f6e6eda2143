//! The MongoDB wire protocol: message framing, OP_MSG, and the legacy OP_QUERY/OP_REPLY pair
//! that old handshakes still use.
//!
//! Every message starts with a 16-byte little-endian header (length, request id, response
//! to, opcode). OP_MSG (2013) carries flag bits, exactly one kind-0 section (the command
//! document) and any number of kind-1 sections (document sequences, merged into the command
//! as arrays), then an optional CRC-32C checksum.

use bson::{Bson, Document, RawBsonRef, RawDocument};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::engine::error::CommandError;
use crate::engine::size::{MAX_INTERNAL_SIZE, invalid_size};

/// OP_REPLY, the legacy reply to OP_QUERY.
pub const OP_REPLY: i32 = 1;
/// OP_QUERY, used by old drivers (and the Node driver's first handshake).
pub const OP_QUERY: i32 = 2004;
/// OP_COMPRESSED; never advertised, so never expected.
pub const OP_COMPRESSED: i32 = 2012;
/// OP_MSG, the only opcode modern drivers use.
pub const OP_MSG: i32 = 2013;

/// OP_MSG flag: a CRC-32C checksum follows the sections.
pub const FLAG_CHECKSUM_PRESENT: u32 = 1;
/// OP_MSG flag: the sender expects no reply (request) / more replies follow (reply).
pub const FLAG_MORE_TO_COME: u32 = 1 << 1;

/// Largest message we accept (mongod's `maxMessageSizeBytes`, which `hello` advertises). A
/// header announcing a longer (or shorter than a header) message closes the connection, as
/// mongod's transport layer does ("recv(): message msgLen N is invalid"); nothing of the
/// announced body is allocated or read.
pub const MAX_MESSAGE_SIZE: usize = 48_000_000;

/// Why a message could not be read; the connection is closed after any of these.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The socket failed or closed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The bytes do not form a valid message.
    #[error("malformed message: {0}")]
    Malformed(String),
}

/// One decoded request.
#[derive(Debug, Clone)]
pub struct Request {
    /// The sender's request id, echoed as `responseTo`.
    pub request_id: i32,
    /// How the command arrived, which decides the reply's shape.
    pub kind: RequestKind,
    /// The command document, with kind-1 sequences merged in as arrays.
    pub command: Document,
    /// A top-level field the command document holds twice (the parsed document keeps one).
    pub duplicate_field: Option<String>,
    /// A parse error mongod answers with an error reply rather than by closing the
    /// connection: a body or sequence document over 16 MiB + 16 KiB (10334,
    /// `BSONObjectTooLarge`). `command` is then empty.
    pub error: Option<CommandError>,
}

/// The opcode a request used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// OP_MSG; `more_to_come` means no reply is wanted.
    Msg {
        /// The request's flag bits.
        flags: u32,
    },
    /// Legacy OP_QUERY on `<db>.$cmd`; answered with OP_REPLY.
    Query,
}

impl RequestKind {
    /// Whether the client asked for no reply (OP_MSG moreToCome).
    pub fn no_reply_wanted(self) -> bool {
        matches!(self, RequestKind::Msg { flags } if flags & FLAG_MORE_TO_COME != 0)
    }
}

/// Reads one message. `Ok(None)` means the peer closed the connection cleanly.
///
/// # Cancel safety
/// Not cancel safe: a message partly read when the future is dropped is lost, and the
/// stream is then out of step. The server only drops it when it closes the connection.
pub async fn read_request<R: AsyncRead + Unpin>(
    reader: &mut R,
) -> Result<Option<Request>, WireError> {
    let mut header = [0u8; 16];
    match reader.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let length = i32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
    let request_id = i32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
    let op_code = i32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
    let length = usize::try_from(length)
        .ok()
        .filter(|l| (16..=MAX_MESSAGE_SIZE).contains(l))
        .ok_or_else(|| WireError::Malformed(format!("message length {length} out of range")))?;
    let mut body = vec![0u8; length - 16];
    reader.read_exact(&mut body).await?;
    let (kind, parsed) = match op_code {
        OP_MSG => {
            let (flags, parsed) = parse_op_msg(&body)?;
            if flags & FLAG_CHECKSUM_PRESENT != 0 {
                let mut whole = header.to_vec();
                whole.extend_from_slice(&body);
                if !verify_checksum(&whole) {
                    return Err(WireError::Malformed("OP_MSG checksum mismatch".into()));
                }
            }
            (RequestKind::Msg { flags }, parsed)
        }
        OP_QUERY => (
            RequestKind::Query,
            Parsed {
                command: parse_op_query(&body)?,
                ..Parsed::default()
            },
        ),
        OP_COMPRESSED => {
            return Err(WireError::Malformed(
                "OP_COMPRESSED was not negotiated".into(),
            ));
        }
        other => return Err(WireError::Malformed(format!("unsupported opcode {other}"))),
    };
    Ok(Some(Request {
        request_id,
        kind,
        command: parsed.command,
        duplicate_field: parsed.duplicate_field,
        error: parsed.error,
    }))
}

fn read_i32(bytes: &[u8], at: usize) -> Result<i32, WireError> {
    bytes
        .get(at..at + 4)
        .map(|b| i32::from_le_bytes(b.try_into().expect("4 bytes")))
        .ok_or_else(|| WireError::Malformed("truncated message".into()))
}

fn read_cstring(bytes: &[u8], at: usize) -> Result<(&str, usize), WireError> {
    let rest = bytes
        .get(at..)
        .ok_or_else(|| WireError::Malformed("truncated cstring".into()))?;
    let end = rest
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| WireError::Malformed("unterminated cstring".into()))?;
    let text = std::str::from_utf8(&rest[..end])
        .map_err(|_| WireError::Malformed("cstring is not UTF-8".into()))?;
    Ok((text, at + end + 1))
}

/// The first top-level key that appears twice in a raw document.
fn first_duplicate_key(raw: &bson::RawDocument) -> Option<String> {
    let mut seen = std::collections::HashSet::new();
    for element in raw {
        let (key, _) = element.ok()?;
        if !seen.insert(key) {
            return Some(key.to_string());
        }
    }
    None
}

/// Reads one BSON document at `at`, returning it and the offset after it.
fn read_document(bytes: &[u8], at: usize) -> Result<(Document, usize), WireError> {
    let (raw, next) = read_raw_slice(bytes, at)?;
    Ok((decode(raw)?, next))
}

/// The [`Document`] a received BSON document holds.
fn decode(raw: &RawDocument) -> Result<Document, WireError> {
    to_document(raw).map_err(|e| WireError::Malformed(format!("invalid BSON: {e}")))
}

/// Converts a raw document to a [`Document`] in one pass over its bytes.
///
/// The same result as `Document::try_from(raw)`, which copies every sub-document into a
/// buffer of its own before converting it (and so copies a value once per level it is
/// nested in: an aggregation pipeline's inner expressions many times over).
pub fn to_document(raw: &RawDocument) -> bson::raw::Result<Document> {
    let mut doc = Document::new();
    for element in raw {
        let (key, value) = element?;
        doc.insert(key, to_bson(value)?);
    }
    Ok(doc)
}

/// Converts a raw value to a [`Bson`], as `Bson::try_from(value.to_raw_bson())` does.
fn to_bson(value: RawBsonRef<'_>) -> bson::raw::Result<Bson> {
    Ok(match value {
        RawBsonRef::Double(d) => Bson::Double(d),
        RawBsonRef::String(s) => Bson::String(s.to_string()),
        RawBsonRef::Document(d) => Bson::Document(to_document(d)?),
        RawBsonRef::Array(items) => Bson::Array(
            items
                .into_iter()
                .map(|item| to_bson(item?))
                .collect::<bson::raw::Result<_>>()?,
        ),
        RawBsonRef::Boolean(b) => Bson::Boolean(b),
        RawBsonRef::Null => Bson::Null,
        RawBsonRef::RegularExpression(re) => {
            // Options in alphabetical order, as the library stores them.
            let mut options: Vec<char> = re.options.chars().collect();
            options.sort_unstable();
            Bson::RegularExpression(bson::Regex {
                pattern: re.pattern.to_string(),
                options: options.into_iter().collect(),
            })
        }
        RawBsonRef::JavaScriptCode(code) => Bson::JavaScriptCode(code.to_string()),
        RawBsonRef::JavaScriptCodeWithScope(code) => {
            Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope {
                code: code.code.to_string(),
                scope: to_document(code.scope)?,
            })
        }
        RawBsonRef::Int32(i) => Bson::Int32(i),
        RawBsonRef::Int64(i) => Bson::Int64(i),
        RawBsonRef::Timestamp(t) => Bson::Timestamp(t),
        RawBsonRef::Binary(b) => Bson::Binary(bson::Binary {
            subtype: b.subtype,
            bytes: b.bytes.to_vec(),
        }),
        RawBsonRef::ObjectId(id) => Bson::ObjectId(id),
        RawBsonRef::DateTime(dt) => Bson::DateTime(dt),
        RawBsonRef::Symbol(s) => Bson::Symbol(s.to_string()),
        RawBsonRef::Decimal128(d) => Bson::Decimal128(d),
        RawBsonRef::Undefined => Bson::Undefined,
        RawBsonRef::MaxKey => Bson::MaxKey,
        RawBsonRef::MinKey => Bson::MinKey,
        // Its fields are private; it holds no document, so the library's copy is cheap.
        other @ RawBsonRef::DbPointer(_) => Bson::try_from(other.to_raw_bson())?,
    })
}

/// Borrows the BSON document at `at` (checked for well-formedness, not copied).
fn read_raw_slice(bytes: &[u8], at: usize) -> Result<(&RawDocument, usize), WireError> {
    let size = usize::try_from(read_i32(bytes, at)?)
        .map_err(|_| WireError::Malformed("negative document size".into()))?;
    let slice = at
        .checked_add(size)
        .and_then(|end| bytes.get(at..end))
        .ok_or_else(|| WireError::Malformed("document overruns its section".into()))?;
    let raw = RawDocument::from_bytes(slice)
        .map_err(|e| WireError::Malformed(format!("invalid BSON: {e}")))?;
    Ok((raw, at + size))
}

/// mongod's error for a received object over 16 MiB + 16 KiB, if `raw` is one.
fn oversized(raw: &RawDocument) -> Option<CommandError> {
    let size = raw.as_bytes().len();
    if size <= MAX_INTERNAL_SIZE {
        return None;
    }
    let first = raw
        .iter()
        .next()
        .and_then(Result::ok)
        .and_then(|(key, value)| Some((key, Bson::try_from(value.to_raw_bson()).ok()?)));
    Some(invalid_size(
        size,
        first.as_ref().map(|(key, value)| (*key, value)),
    ))
}

/// What an OP_MSG or OP_QUERY request carried.
#[derive(Debug, Default)]
struct Parsed {
    command: Document,
    duplicate_field: Option<String>,
    error: Option<CommandError>,
}

/// Flags and the parsed request: the command with sequences merged in, a duplicated
/// top-level field if any, or the size error mongod answers instead.
fn parse_op_msg(body: &[u8]) -> Result<(u32, Parsed), WireError> {
    let flags = read_i32(body, 0)? as u32;
    // Bits 0-15 are required: an unknown one set is an error. Bits 16-31 are optional (the
    // only one defined, exhaustAllowed, 1 << 16, streams replies only for an awaitable hello on
    // a replica-set member; see `server.rs`).
    let known = FLAG_CHECKSUM_PRESENT | FLAG_MORE_TO_COME;
    if flags & 0xFFFF & !known != 0 {
        return Err(WireError::Malformed(format!(
            "unknown required flag bits {flags:#x}"
        )));
    }
    let mut end = body.len();
    if flags & FLAG_CHECKSUM_PRESENT != 0 {
        end = end
            .checked_sub(4)
            .ok_or_else(|| WireError::Malformed("missing checksum".into()))?;
    }
    let sections = &body[..end];
    let mut at = 4;
    let mut command: Option<Document> = None;
    let mut duplicate_field = None;
    let mut error = None;
    let mut sequences: Vec<(String, Vec<Document>)> = Vec::new();
    while at < sections.len() {
        let kind = sections[at];
        at += 1;
        match kind {
            0 => {
                if command.is_some() {
                    return Err(WireError::Malformed("more than one kind-0 section".into()));
                }
                let (raw, next) = read_raw_slice(sections, at)?;
                if let Some(too_large) = oversized(raw) {
                    error.get_or_insert(too_large);
                    command = Some(Document::new());
                } else {
                    duplicate_field = first_duplicate_key(raw);
                    command = Some(decode(raw)?);
                }
                at = next;
            }
            1 => {
                let size = usize::try_from(read_i32(sections, at)?)
                    .map_err(|_| WireError::Malformed("negative section size".into()))?;
                let section_end = at.saturating_add(size);
                if size < 5 || section_end > sections.len() {
                    return Err(WireError::Malformed(
                        "document sequence overruns the message".into(),
                    ));
                }
                let (identifier, mut cursor) = read_cstring(sections, at + 4)?;
                let identifier = identifier.to_string();
                let mut docs = Vec::new();
                while cursor < section_end {
                    let (raw, next) = read_raw_slice(&sections[..section_end], cursor)?;
                    if let Some(too_large) = oversized(raw) {
                        error.get_or_insert(too_large);
                    } else if error.is_none() {
                        docs.push(decode(raw)?);
                    }
                    cursor = next;
                }
                if sequences.iter().any(|(name, _)| *name == identifier) {
                    return Err(WireError::Malformed(format!(
                        "duplicate document sequence {identifier}"
                    )));
                }
                sequences.push((identifier, docs));
                at = section_end;
            }
            other => {
                return Err(WireError::Malformed(format!(
                    "unknown section kind {other}"
                )));
            }
        }
    }
    let mut command = command.ok_or_else(|| WireError::Malformed("no kind-0 section".into()))?;
    if error.is_some() {
        let parsed = Parsed {
            error,
            ..Parsed::default()
        };
        return Ok((flags, parsed));
    }
    for (identifier, docs) in sequences {
        // A field both in the body and as a sequence is a duplicate field, answered as one.
        if command.contains_key(&identifier) {
            duplicate_field.get_or_insert_with(|| identifier.clone());
            continue;
        }
        command.insert(
            identifier,
            Bson::Array(docs.into_iter().map(Bson::Document).collect()),
        );
    }
    Ok((
        flags,
        Parsed {
            command,
            duplicate_field,
            error: None,
        },
    ))
}

/// Verifies the CRC-32C of a whole OP_MSG (header included) whose checksum flag is set.
pub fn verify_checksum(message: &[u8]) -> bool {
    if message.len() < 20 {
        return false;
    }
    let (covered, stated) = message.split_at(message.len() - 4);
    crc32c::crc32c(covered) == u32::from_le_bytes(stated.try_into().expect("4 bytes"))
}

fn parse_op_query(body: &[u8]) -> Result<Document, WireError> {
    let (collection, at) = read_cstring(body, 4)?;
    let at = at + 8; // numberToSkip, numberToReturn
    let (mut query, _) = read_document(body, at)?;
    let Some(db) = collection.strip_suffix(".$cmd") else {
        return Err(WireError::Malformed(format!(
            "OP_QUERY is only supported for commands, not on {collection}"
        )));
    };
    // Old drivers wrap the command as {$query: {...}, $readPreference: ...}.
    if let Ok(inner) = query.get_document("$query") {
        query = inner.clone();
    }
    query.insert("$db", db);
    Ok(query)
}

/// Encodes an OP_MSG reply with a single kind-0 section.
pub fn encode_op_msg(request_id: i32, response_to: i32, body: &Document) -> Vec<u8> {
    let mut doc_bytes = Vec::new();
    body.to_writer(&mut doc_bytes)
        .expect("writing BSON to a Vec cannot fail");
    let length = 16 + 4 + 1 + doc_bytes.len();
    let mut out = Vec::with_capacity(length);
    out.extend_from_slice(&(length as i32).to_le_bytes());
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(&response_to.to_le_bytes());
    out.extend_from_slice(&OP_MSG.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.push(0);
    out.extend_from_slice(&doc_bytes);
    out
}

/// Encodes a legacy OP_REPLY carrying one document.
pub fn encode_op_reply(request_id: i32, response_to: i32, body: &Document) -> Vec<u8> {
    let mut doc_bytes = Vec::new();
    body.to_writer(&mut doc_bytes)
        .expect("writing BSON to a Vec cannot fail");
    let length = 16 + 4 + 8 + 4 + 4 + doc_bytes.len();
    let mut out = Vec::with_capacity(length);
    out.extend_from_slice(&(length as i32).to_le_bytes());
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(&response_to.to_le_bytes());
    out.extend_from_slice(&OP_REPLY.to_le_bytes());
    out.extend_from_slice(&8i32.to_le_bytes()); // responseFlags: AwaitCapable
    out.extend_from_slice(&0i64.to_le_bytes()); // cursorID
    out.extend_from_slice(&0i32.to_le_bytes()); // startingFrom
    out.extend_from_slice(&1i32.to_le_bytes()); // numberReturned
    out.extend_from_slice(&doc_bytes);
    out
}

/// Writes an encoded message and flushes it.
///
/// # Cancel safety
/// Not cancel safe: dropping the future may leave part of the message written.
pub async fn write_message<W: AsyncWrite + Unpin>(
    writer: &mut W,
    bytes: &[u8],
) -> std::io::Result<()> {
    writer.write_all(bytes).await?;
    writer.flush().await
}

#[cfg(test)]
mod tests {
    use bson::spec::BinarySubtype;
    use bson::{Binary, Decimal128, JavaScriptCodeWithScope, Regex, Timestamp, doc, oid};

    use super::*;

    /// `{p: DBPointer("db.c", id)}`, written by hand: `doc!` cannot make one.
    fn db_pointer_document() -> Vec<u8> {
        let mut element = vec![0x0C, b'p', 0];
        element.extend_from_slice(&5i32.to_le_bytes());
        element.extend_from_slice(b"db.c\0");
        element.extend_from_slice(&oid::ObjectId::new().bytes());
        let mut bytes = ((4 + element.len() + 1) as i32).to_le_bytes().to_vec();
        bytes.extend_from_slice(&element);
        bytes.push(0);
        bytes
    }

    #[test]
    fn to_document_reads_every_type_as_the_library_does() {
        let nested = doc! {"a": [1, {"b": [[2.5], {"c": "deep"}]}], "d": {"e": {"f": null}}};
        let pointer = db_pointer_document();
        let pointer = Document::try_from(RawDocument::from_bytes(&pointer).unwrap()).unwrap();
        let original = doc! {
            "double": 1.5,
            "string": "text",
            "document": nested.clone(),
            "array": [1, "two", {"three": 3}, [4]],
            "binary": Binary { subtype: BinarySubtype::Uuid, bytes: vec![1; 16] },
            "undefined": Bson::Undefined,
            "objectId": oid::ObjectId::new(),
            "bool": true,
            "date": bson::DateTime::from_millis(1_700_000_000_000),
            "null": Bson::Null,
            "regex": Regex { pattern: "^a.b$".into(), options: "xmi".into() },
            "js": Bson::JavaScriptCode("return 1".into()),
            "jsScope": JavaScriptCodeWithScope { code: "x".into(), scope: nested },
            "int": 7,
            "timestamp": Timestamp { time: 5, increment: 6 },
            "long": 8i64,
            "decimal": Decimal128::from_bytes([3; 16]),
            "symbol": Bson::Symbol("sym".into()),
            "dbPointer": pointer.get("p").unwrap().clone(),
            "maxKey": Bson::MaxKey,
            "minKey": Bson::MinKey,
        };
        let bytes = bson::to_vec(&original).unwrap();
        let raw = RawDocument::from_bytes(&bytes).unwrap();
        let ours = to_document(raw).unwrap();
        assert_eq!(ours, Document::try_from(raw).unwrap());
        // The regex's options come back sorted, as the library sorts them.
        assert_eq!(
            ours.get("regex"),
            Some(&Bson::RegularExpression(Regex {
                pattern: "^a.b$".into(),
                options: "imx".into()
            }))
        );
    }

    #[test]
    fn to_document_refuses_what_the_library_refuses() {
        // A string whose bytes are not UTF-8, nested two levels down.
        let mut bytes = bson::to_vec(&doc! {"a": {"b": ["xy"]}}).unwrap();
        let at = bytes.windows(2).position(|w| w == b"xy").unwrap();
        bytes[at] = 0xFF;
        let raw = RawDocument::from_bytes(&bytes).unwrap();
        assert!(Document::try_from(raw).is_err());
        assert!(to_document(raw).is_err());
    }
}
