//! Faults on single requests: the proxy reads both directions as whole MongoDB messages (the
//! 16-byte header gives each one's length), so a rule can pick out one command by what it
//! says and delay, cut, refuse it or lose or replace its reply (found by its `responseTo`),
//! that one alone.
//!
//! A stream that does not look like MongoDB messages (a header announcing a length out of
//! range) is forwarded byte for byte from then on, and no rule sees it.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bson::Document;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::engine::error::code_name;
use crate::wire::{self, MAX_MESSAGE_SIZE, Request, RequestKind};

/// How long a late delivery waits for the server's reply (which it discards) before it
/// closes its connection: the command has run by then, or the server is gone.
const LATE_REPLY_WAIT: Duration = Duration::from_secs(30);

/// What the proxy does to a request a rule picks out ([`super::FaultProxy::fault_requests`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestFault {
    /// Delivered late: the request is taken out of its connection, held for `hold`, then
    /// sent to the server on a connection of its own, which reads the reply and records it
    /// ([`RequestRule::late_replies`]).
    /// The command runs then, whatever the client did meanwhile. The client's connection
    /// gets no reply to it: the client waits until its own timeout fires (and, as drivers do,
    /// closes the connection and sends its next command, or the same one again, on another),
    /// or, with `cut_after`, the proxy resets the client's connection that long after it
    /// took the request out, as a client whose timeout fired then would see it fail.
    ///
    /// The copy that arrives late is the request as it was sent. A write the driver made
    /// retryable (`insert_one` and the like, with a transaction number) is refused by the
    /// server once its session has moved on to a later transaction (`TransactionTooOld`, as
    /// mongod answers); a command sent with `run_command`, as mongolock sends its own, runs.
    Late {
        /// How long the request is held.
        hold: Duration,
        /// When to reset the client's connection, counted from when the request was held;
        /// `None` leaves it to the client's own timeout.
        cut_after: Option<Duration>,
    },
    /// Not delivered: the client's connection is reset instead of forwarding the request,
    /// so the command never runs and the client sees a network error.
    Cut,
    /// Not delivered: the proxy answers it with an error reply with this code (`ok: 0`), so
    /// the command never runs and the connection stays up, as a mongos answers a command for
    /// a shard it cannot reach (`HostUnreachable`, 6). Unlike [`RequestFault::Cut`], the
    /// driver keeps its connections and goes on at once.
    Refuse {
        /// The error code of the reply.
        code: i32,
    },
    /// Delivered, but its reply is lost: the connection is reset when the server's answer
    /// comes back. The command ran; its client cannot know.
    LoseReply,
    /// Delivered, but its reply is replaced by an error reply with this code: the command
    /// ran, and its client hears that it failed, as from a mongos whose request to the shard
    /// timed out after the shard had applied it (`ExceededTimeLimit`, 262). The connection
    /// stays up.
    ReplaceReply {
        /// The error code of the reply the client gets.
        code: i32,
    },
}

/// Which requests a rule picks out: by the command document (with the driver's fields, such
/// as `$db` and `lsid`, and document sequences merged in as arrays), and at most how many.
///
/// ```
/// use mongolock_testkit::faults::proxy::Requests;
///
/// let inserts = Requests::named(&["insert"]).times(1);
/// let on_jobs = Requests::matching(|command| command.get_str("insert") == Ok("jobs"));
/// let for_now = Requests::named(&["delete"])
///     .until(std::time::Instant::now() + std::time::Duration::from_millis(200));
/// # let _ = (inserts, on_jobs, for_now);
/// ```
#[derive(Clone)]
pub struct Requests {
    matches: Arc<dyn Fn(&Document) -> bool + Send + Sync>,
    times: Option<u64>,
    until: Option<Instant>,
}

impl Requests {
    /// The commands named `names` (a command's name is the first key of its document).
    pub fn named(names: &[&str]) -> Self {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        Requests::matching(move |command| {
            command
                .keys()
                .next()
                .is_some_and(|first| names.iter().any(|n| n == first))
        })
    }

    /// The commands for which `matches` is true.
    pub fn matching(matches: impl Fn(&Document) -> bool + Send + Sync + 'static) -> Self {
        Requests {
            matches: Arc::new(matches),
            times: None,
            until: None,
        }
    }

    /// Only the first `times` requests that match; afterwards the rule is spent.
    pub fn times(mut self, times: u64) -> Self {
        self.times = Some(times);
        self
    }

    /// Only requests read before `until`; afterwards the rule is spent.
    pub fn until(mut self, until: std::time::Instant) -> Self {
        self.until = Some(Instant::from_std(until));
        self
    }

    /// Whether the rule may still pick out a request read at `now`.
    fn live(&self, now: Instant) -> bool {
        self.times != Some(0) && self.until.is_none_or(|until| now < until)
    }
}

impl fmt::Debug for Requests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Requests")
            .field("times", &self.times)
            .field("until", &self.until)
            .finish_non_exhaustive()
    }
}

/// What one rule has done so far: [`super::FaultProxy::fault_requests`] returns it.
#[derive(Debug, Clone, Default)]
pub struct RequestRule {
    stats: Arc<RuleStats>,
}

#[derive(Debug, Default)]
struct RuleStats {
    applied: AtomicU64,
    delivered: AtomicU64,
    /// The server's replies to the requests delivered late, in the order they came.
    late_replies: Mutex<Vec<Document>>,
}

impl RequestRule {
    /// How many requests the rule picked out (held, cut or sent with their reply to lose).
    pub fn applied(&self) -> u64 {
        self.stats.applied.load(Ordering::SeqCst)
    }

    /// How many requests it held were delivered late: written to the server, and the reply
    /// read (or the connection closed) afterwards.
    pub fn delivered(&self) -> u64 {
        self.stats.delivered.load(Ordering::SeqCst)
    }

    /// The server's replies to the requests it delivered late (OP_MSG replies, whose body
    /// says whether the command ran: `ok: 1`), in the order they came back. A request whose
    /// reply never came (the server closed the connection, or took longer than 30 seconds)
    /// has none.
    pub fn late_replies(&self) -> Vec<Document> {
        self.stats.late_replies.lock().clone()
    }
}

/// One rule in force.
#[derive(Debug)]
struct Rule {
    which: Requests,
    fault: RequestFault,
    stats: Arc<RuleStats>,
}

/// The rules of one proxy, in the order they were added: the first that picks a request
/// decides what happens to it.
#[derive(Debug, Default)]
pub(super) struct Rules {
    rules: Mutex<Vec<Rule>>,
    /// Mirrors whether `rules` is empty, so that connections parse nothing without rules.
    any: AtomicBool,
}

impl Rules {
    pub(super) fn add(&self, which: Requests, fault: RequestFault) -> RequestRule {
        let stats = Arc::new(RuleStats::default());
        let mut rules = self.rules.lock();
        rules.push(Rule {
            which,
            fault,
            stats: stats.clone(),
        });
        self.any.store(true, Ordering::SeqCst);
        RequestRule { stats }
    }

    pub(super) fn clear(&self) {
        let mut rules = self.rules.lock();
        rules.clear();
        self.any.store(false, Ordering::SeqCst);
    }

    /// What to do with the request `message`: the fault of the first rule that picks it out
    /// (which counts it), with the request, or `None` to forward it.
    async fn decide(&self, message: &[u8]) -> Option<(RequestFault, Arc<RuleStats>, Request)> {
        if !self.any.load(Ordering::SeqCst) {
            return None;
        }
        let mut bytes = message;
        let request = wire::read_request(&mut bytes).await.ok()??;
        let now = Instant::now();
        let mut rules = self.rules.lock();
        let index = rules
            .iter()
            .position(|rule| rule.which.live(now) && (rule.which.matches)(&request.command))?;
        let rule = &mut rules[index];
        if let Some(times) = rule.which.times.as_mut() {
            *times -= 1;
        }
        rule.stats.applied.fetch_add(1, Ordering::SeqCst);
        Some((rule.fault, rule.stats.clone(), request))
    }
}

/// An error reply with `code` to `request`, in the shape it was sent in (`responseTo` its
/// request id).
fn error_reply(request: &Request, code: i32) -> Vec<u8> {
    let body = bson::doc! {
        "ok": 0.0,
        "errmsg": format!("fault proxy: {}", code_name(code)),
        "code": code,
        "codeName": code_name(code),
    };
    match request.kind {
        RequestKind::Query => wire::encode_op_reply(0, request.request_id, &body),
        RequestKind::Msg { .. } => wire::encode_op_msg(0, request.request_id, &body),
    }
}

/// The `responseTo` of a message.
fn response_to(message: &[u8]) -> Option<i32> {
    Some(i32::from_le_bytes(message.get(8..12)?.try_into().ok()?))
}

/// A request held for late delivery.
#[derive(Debug)]
pub(super) struct Held {
    message: Vec<u8>,
    due: Instant,
    stats: Arc<RuleStats>,
}

impl Held {
    /// Sends the request to `upstream` on a connection of its own once it is due, reads its
    /// reply (unless it asked for none) and records it for its rule.
    pub(super) async fn deliver(self, upstream: SocketAddr) {
        tokio::time::sleep_until(self.due).await;
        let Ok(mut server) = TcpStream::connect(upstream).await else {
            tracing::debug!(%upstream, "fault proxy: a late request found no server");
            return;
        };
        let _ = server.set_nodelay(true);
        if server.write_all(&self.message).await.is_err() {
            return;
        }
        self.stats.delivered.fetch_add(1, Ordering::SeqCst);
        if !wants_reply(&self.message) {
            return;
        }
        let mut header = [0u8; 16];
        let read = async {
            server.read_exact(&mut header).await?;
            let length = message_length(&header).unwrap_or(16);
            let mut reply = header.to_vec();
            reply.resize(length, 0);
            server.read_exact(&mut reply[16..]).await.map(|_| reply)
        };
        if let Ok(Ok(reply)) = tokio::time::timeout(LATE_REPLY_WAIT, read).await
            && let Ok(Some(reply)) = wire::read_request(&mut reply.as_slice()).await
        {
            self.stats.late_replies.lock().push(reply.command);
        }
    }
}

/// The length a message header announces, if it is one the server would accept.
fn message_length(header: &[u8]) -> Option<usize> {
    let length = i32::from_le_bytes(header.get(0..4)?.try_into().ok()?);
    usize::try_from(length)
        .ok()
        .filter(|l| (16..=MAX_MESSAGE_SIZE).contains(l))
}

/// False for an OP_MSG sent with `moreToCome` (no reply comes).
fn wants_reply(message: &[u8]) -> bool {
    let op_code = message
        .get(12..16)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let flags = message
        .get(16..20)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    !(op_code == Some(wire::OP_MSG) && flags.is_some_and(|f| f & wire::FLAG_MORE_TO_COME != 0))
}

/// What one connection's two directions share about request faults: what to do with the
/// replies to some requests, by request id.
#[derive(Debug, Default)]
pub(super) struct ConnectionFaults {
    replies: Mutex<HashMap<i32, ReplyFault>>,
    /// The proxy's own answers to requests it refused, for the client.
    answers: Mutex<Vec<Vec<u8>>>,
    /// Wakes the client side when an answer is queued.
    answered: Notify,
}

/// What to do with the reply to a request.
#[derive(Debug, Clone)]
enum ReplyFault {
    /// Reset the connection instead ([`RequestFault::LoseReply`]).
    Lose,
    /// Send this instead ([`RequestFault::ReplaceReply`]).
    Replace(Vec<u8>),
}

/// What the client side does with a reply from the server.
#[derive(Debug)]
pub(super) enum Reply {
    /// Forward it.
    Forward,
    /// Reset the connection instead.
    Lose,
    /// Send this instead.
    Replace(Vec<u8>),
}

impl ConnectionFaults {
    /// Queues `answer` for the client.
    pub(super) fn answer(&self, answer: Vec<u8>) {
        self.answers.lock().push(answer);
        self.answered.notify_one();
    }

    /// The next answer of the proxy's own for the client, once there is one.
    pub(super) async fn next_answer(&self) -> Vec<u8> {
        loop {
            let notified = self.answered.notified();
            if let Some(answer) = {
                let mut answers = self.answers.lock();
                (!answers.is_empty()).then(|| answers.remove(0))
            } {
                return answer;
            }
            notified.await;
        }
    }

    /// What to do with the server's `message` (a reply, or raw bytes).
    pub(super) fn reply(&self, message: &[u8]) -> Reply {
        let mut replies = self.replies.lock();
        if replies.is_empty() {
            return Reply::Forward;
        }
        match response_to(message).and_then(|id| replies.remove(&id)) {
            None => Reply::Forward,
            Some(ReplyFault::Lose) => Reply::Lose,
            Some(ReplyFault::Replace(instead)) => Reply::Replace(instead),
        }
    }
}

/// Cuts a client's stream into whole messages and applies the rules to each.
#[derive(Debug, Default)]
pub(super) struct Framer {
    pending: Vec<u8>,
    /// The stream stopped looking like MongoDB messages: forward bytes as they come.
    raw: bool,
    /// When to reset the connection (a late request's `cut_after`).
    pub(super) cut_at: Option<Instant>,
}

/// What the framer does with the bytes read so far.
#[derive(Debug)]
pub(super) enum Step {
    /// Forward these bytes (whole messages, or raw bytes).
    Forward(Vec<u8>),
    /// Reset the connection now: a request was cut.
    Cut,
    /// Hand this request to the proxy for late delivery.
    Hold(Held),
    /// Send this to the client: the proxy's answer to a request it refused.
    Answer(Vec<u8>),
}

impl Framer {
    /// Takes `bytes` just read and returns them as whole messages (`true`) or raw bytes
    /// (`false`), in order; whatever does not make a whole message yet waits for more.
    pub(super) fn messages(&mut self, bytes: &[u8]) -> Vec<(Vec<u8>, bool)> {
        if self.raw {
            return vec![(bytes.to_vec(), false)];
        }
        self.pending.extend_from_slice(bytes);
        let mut messages = Vec::new();
        loop {
            if self.pending.len() < 16 {
                break;
            }
            let Some(length) = message_length(&self.pending) else {
                self.raw = true;
                messages.push((std::mem::take(&mut self.pending), false));
                break;
            };
            if self.pending.len() < length {
                break;
            }
            let rest = self.pending.split_off(length);
            messages.push((std::mem::replace(&mut self.pending, rest), true));
        }
        messages
    }

    /// Takes the client's `bytes` just read and returns what to do, in order, after the
    /// rules looked at each whole request.
    pub(super) async fn requests(
        &mut self,
        bytes: &[u8],
        rules: &Rules,
        connection: &ConnectionFaults,
    ) -> Vec<Step> {
        let mut steps = Vec::new();
        for (message, whole) in self.messages(bytes) {
            let decided = if whole {
                rules.decide(&message).await
            } else {
                None
            };
            let Some((fault, stats, request)) = decided else {
                steps.push(Step::Forward(message));
                continue;
            };
            match fault {
                RequestFault::Cut => {
                    steps.push(Step::Cut);
                    break;
                }
                RequestFault::Refuse { code } => {
                    if wants_reply(&message) {
                        steps.push(Step::Answer(error_reply(&request, code)));
                    }
                }
                RequestFault::LoseReply => {
                    (connection.replies.lock()).insert(request.request_id, ReplyFault::Lose);
                    steps.push(Step::Forward(message));
                }
                RequestFault::ReplaceReply { code } => {
                    let instead = ReplyFault::Replace(error_reply(&request, code));
                    (connection.replies.lock()).insert(request.request_id, instead);
                    steps.push(Step::Forward(message));
                }
                RequestFault::Late { hold, cut_after } => {
                    let now = Instant::now();
                    if let Some(cut) = cut_after.and_then(|c| now.checked_add(c)) {
                        self.cut_at = Some(self.cut_at.map_or(cut, |at| at.min(cut)));
                    }
                    // A hold too long for the clock is a request never delivered.
                    let year = Duration::from_secs(365 * 24 * 3600);
                    let due = now.checked_add(hold.min(year)).unwrap_or(now + year);
                    steps.push(Step::Hold(Held {
                        message,
                        due,
                        stats,
                    }));
                }
            }
        }
        steps
    }

    /// The bytes of a message not complete when the client closed its side: forwarded as
    /// they are, so that the server sees what a plain forwarder would have sent.
    pub(super) fn rest(&mut self) -> Option<Vec<u8>> {
        (!self.pending.is_empty()).then(|| std::mem::take(&mut self.pending))
    }
}

/// The error a connection ends with when a rule resets it.
pub(super) fn reset(why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionReset,
        format!("fault proxy: {why}"),
    )
}
