//! What the conformance tests share: a driver client whose commands are captured as they go
//! out (command monitoring), and a captured adoption made another call's.

use bson::{Bson, Document, oid::ObjectId};

/// The commands a client sends, captured as they go out (command monitoring).
pub type Captured = std::sync::Arc<std::sync::Mutex<Vec<Document>>>;

/// A driver client on `uri` whose commands named in `names` are captured as they go out.
pub async fn monitored_client(
    uri: &str,
    names: &'static [&'static str],
) -> (mongodb::Client, Captured) {
    let captured: Captured = Default::default();
    let handler = {
        let captured = captured.clone();
        mongodb::event::EventHandler::callback(
            move |event: mongodb::event::command::CommandEvent| {
                if let mongodb::event::command::CommandEvent::Started(e) = event
                    && names.contains(&e.command_name.as_str())
                {
                    captured.lock().unwrap().push(e.command);
                }
            },
        )
    };
    let mut options = mongodb::options::ClientOptions::parse(uri).await.unwrap();
    options.command_event_handler = Some(handler);
    (mongodb::Client::with_options(options).unwrap(), captured)
}

/// `command` (a captured adoption) made the adoption of the call `to`: the call it names
/// (the one ObjectId of its line's filter, `keepalive::adopt_command`) replaced.
pub fn for_call(command: &Document, to: ObjectId) -> Document {
    fn replace(value: &mut Bson, to: ObjectId) -> usize {
        match value {
            Bson::ObjectId(id) => {
                *id = to;
                1
            }
            Bson::Document(d) => d.iter_mut().map(|(_, v)| replace(v, to)).sum(),
            Bson::Array(a) => a.iter_mut().map(|v| replace(v, to)).sum(),
            _ => 0,
        }
    }
    let mut out = command.clone();
    let Some(Bson::Array(updates)) = out.get_mut("updates") else {
        panic!("an update: {command}");
    };
    let Some(Bson::Document(statement)) = updates.first_mut() else {
        panic!("a statement: {command}");
    };
    let Some(Bson::Array(stages)) = statement.get_mut("u") else {
        panic!("a pipeline: {command}");
    };
    let Some(Bson::Document(stage)) = stages.first_mut() else {
        panic!("a stage: {command}");
    };
    let queue = (stage.get_document_mut("$set").ok()).and_then(|set| set.get_mut("queue"));
    let Some(queue) = queue else {
        panic!("the adoption sets the line: {command}");
    };
    assert_eq!(replace(queue, to), 1, "one call named: {command}");
    out
}
