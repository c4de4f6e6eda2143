//! The commands one driver client sent, with how each ended (the driver's command
//! monitoring), for tests that watch what the library puts on the wire: its attempts, its
//! change streams and what they delivered.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use bson::{Bson, Document};
use mongodb::event::command::CommandEvent;

/// One command a recorded client started, and how it ended.
#[derive(Debug, Clone)]
pub struct Command {
    /// When it started.
    pub at: Instant,
    /// The driver's request id.
    pub request_id: i32,
    /// The command's name.
    pub name: String,
    /// The command as sent.
    pub body: Document,
    /// `None` while running, then whether it succeeded.
    pub succeeded: Option<bool>,
    /// When it ended (its reply or its failure came back).
    pub ended: Option<Instant>,
    /// The reply, for a command that succeeded.
    pub reply: Option<Document>,
}

impl Command {
    /// Whether this is the `aggregate` that opens a change stream.
    pub fn opens_change_stream(&self) -> bool {
        self.name == "aggregate"
            && self
                .body
                .get_array("pipeline")
                .ok()
                .and_then(|stages| stages.first())
                .and_then(Bson::as_document)
                .is_some_and(|stage| stage.contains_key("$changeStream"))
    }

    /// The id of the cursor a successful `aggregate` opened (a change stream's included).
    pub fn opened_cursor(&self) -> Option<i64> {
        let cursor = self.reply.as_ref()?.get_document("cursor").ok()?;
        cursor.get_i64("id").ok().filter(|id| *id != 0)
    }

    /// The cursor a `getMore` reads.
    pub fn reads_cursor(&self) -> Option<i64> {
        (self.name == "getMore")
            .then(|| self.body.get_i64("getMore").ok())
            .flatten()
    }

    /// Whether this is a stream read whose reply carries an event about `resource`.
    pub fn delivered(&self, resource: &str) -> bool {
        let Some(cursor) = self
            .reply
            .as_ref()
            .and_then(|reply| reply.get_document("cursor").ok())
        else {
            return false;
        };
        ["firstBatch", "nextBatch"]
            .iter()
            .filter_map(|batch| cursor.get_array(batch).ok())
            .flatten()
            .filter_map(Bson::as_document)
            .any(|event| {
                event
                    .get_document("documentKey")
                    .is_ok_and(|key| key.get_str("_id") == Ok(resource))
            })
    }
}

/// The commands one driver client sent, in order (handshakes and session ends left out).
#[derive(Clone, Default)]
pub struct Recorder {
    commands: Arc<Mutex<Vec<Command>>>,
}

impl Recorder {
    /// Records one event of the driver's command monitoring.
    pub fn record(&self, event: CommandEvent) {
        let mut commands = self.commands.lock().unwrap();
        match event {
            CommandEvent::Started(started) => {
                if matches!(
                    started.command_name.as_str(),
                    "hello" | "isMaster" | "endSessions"
                ) {
                    return;
                }
                commands.push(Command {
                    at: Instant::now(),
                    request_id: started.request_id,
                    name: started.command_name,
                    body: started.command,
                    succeeded: None,
                    ended: None,
                    reply: None,
                });
            }
            CommandEvent::Succeeded(done) => {
                if let Some(c) = commands
                    .iter_mut()
                    .find(|c| c.request_id == done.request_id)
                {
                    c.succeeded = Some(true);
                    c.ended = Some(Instant::now());
                    c.reply = Some(done.reply);
                }
            }
            CommandEvent::Failed(failed) => {
                if let Some(c) = commands
                    .iter_mut()
                    .find(|c| c.request_id == failed.request_id)
                {
                    c.succeeded = Some(false);
                    c.ended = Some(Instant::now());
                }
            }
            _ => {}
        }
    }

    /// Every command recorded so far.
    pub fn all(&self) -> Vec<Command> {
        self.commands.lock().unwrap().clone()
    }

    /// Takes the commands recorded so far, as name and document.
    pub fn take(&self) -> Vec<(String, Document)> {
        std::mem::take(&mut *self.commands.lock().unwrap())
            .into_iter()
            .map(|c| (c.name, c.body))
            .collect()
    }

    /// Takes the commands recorded so far, whole.
    pub fn take_commands(&self) -> Vec<Command> {
        std::mem::take(&mut *self.commands.lock().unwrap())
    }

    /// The names of the commands recorded so far (see [`Recorder::take`]).
    pub fn take_names(&self) -> Vec<String> {
        self.take().into_iter().map(|(name, _)| name).collect()
    }

    /// Forgets the commands that have ended (one still running, such as the stream's
    /// waiting `getMore`, is kept, to see its reply).
    pub fn clear(&self) {
        self.commands
            .lock()
            .unwrap()
            .retain(|c| c.succeeded.is_none());
    }
}

/// A driver client on `uri` with a connection pool of its own, named `app_name` in the
/// handshake if given, whose commands are recorded.
pub async fn recorded_client(uri: &str, app_name: Option<&str>) -> (Recorder, mongodb::Client) {
    let mut options = mongodb::options::ClientOptions::parse(uri)
        .await
        .expect("a valid URI");
    options.app_name = app_name.map(str::to_owned);
    let recorder = Recorder::default();
    let sink = recorder.clone();
    options.command_event_handler = Some(mongodb::event::EventHandler::callback(
        move |event: CommandEvent| sink.record(event),
    ));
    let client = mongodb::Client::with_options(options).expect("a client");
    (recorder, client)
}
