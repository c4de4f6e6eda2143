//! Fail points in mongod's shape: `failCommand` and `onPrimaryTransactionalWrite`.
//!
//! `configureFailPoint` sets a fail point's mode (`alwaysOn`, `off`, `{times: n}`,
//! `{skip: n}`, `{activationProbability: p}`) and data. `failCommand` acts before a command
//! runs (block, close the connection, or fail with a code) or after it (a
//! `writeConcernError`). `onPrimaryTransactionalWrite` acts on a retryable write that
//! executes (never on a replayed retry): it either fails it before commit with
//! `failBeforeCommitExceptionCode`, or lets it commit; with `closeConnection` (the default)
//! the connection is then closed instead of replying, so the client cannot know the outcome.
//! `failGetMoreAfterCursorCheckout` fails a `getMore` with `errorCode` once the cursor is
//! checked out, which is where mongod labels change-stream errors as resumable.

use std::time::Duration;

use bson::{Bson, Document};
use parking_lot::Mutex;

use crate::engine::compare::as_f64;
use crate::engine::error::{CommandError, Result, codes};

/// When a fail point fires.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// Never.
    Off,
    /// Every time.
    AlwaysOn,
    /// The next `n` times, then off.
    Times(i64),
    /// Not the next `n` times, then always.
    Skip(i64),
    /// Each time with probability `p`.
    Probability(f64),
}

impl Mode {
    fn parse(mode: Option<&Bson>) -> Result<Mode> {
        match mode {
            None => Err(CommandError::new(
                codes::ILLEGAL_OPERATION,
                "When setting a failpoint, you must supply a 'mode'",
            )),
            Some(Bson::String(s)) if s == "alwaysOn" => Ok(Mode::AlwaysOn),
            Some(Bson::String(s)) if s == "off" => Ok(Mode::Off),
            Some(Bson::String(s)) => Err(CommandError::bad_value(format!("unknown mode: {s}"))),
            Some(Bson::Document(d)) if d.len() == 1 => {
                let (key, value) = d.iter().next().expect("one field");
                let number = as_f64(value).ok_or_else(|| {
                    CommandError::type_mismatch(format!("'{key}' must be a number"))
                })?;
                match key.as_str() {
                    "times" | "skip" if number < 0.0 || number.fract() != 0.0 => Err(
                        CommandError::bad_value(format!("'{key}' must be a non-negative integer")),
                    ),
                    "times" => Ok(Mode::Times(number as i64)),
                    "skip" => Ok(Mode::Skip(number as i64)),
                    "activationProbability" if (0.0..=1.0).contains(&number) => {
                        Ok(Mode::Probability(number))
                    }
                    "activationProbability" => Err(CommandError::bad_value(
                        "activationProbability must be between 0.0 and 1.0",
                    )),
                    other => Err(CommandError::bad_value(format!("unknown mode: {other}"))),
                }
            }
            Some(other) => Err(CommandError::type_mismatch(format!(
                "'mode' must be a string or an object, not {other}"
            ))),
        }
    }

    /// Whether the fail point fires on this activation; updates counters.
    fn fire(&mut self) -> bool {
        match self {
            Mode::Off => false,
            Mode::AlwaysOn => true,
            Mode::Times(n) => {
                if *n > 0 {
                    *n -= 1;
                    if *n == 0 {
                        *self = Mode::Off;
                    }
                    true
                } else {
                    false
                }
            }
            Mode::Skip(n) => {
                if *n > 0 {
                    *n -= 1;
                    false
                } else {
                    true
                }
            }
            Mode::Probability(p) => rand::random::<f64>() < *p,
        }
    }
}

/// The `data` of a `failCommand` fail point.
#[derive(Debug, Clone, Default)]
pub struct FailCommand {
    commands: Vec<String>,
    fail_all: bool,
    error_code: Option<i32>,
    error_labels: Option<Vec<String>>,
    error_extra_info: Option<Document>,
    close_connection: bool,
    block: Option<Duration>,
    write_concern_error: Option<Document>,
    app_name: Option<String>,
    namespace: Option<String>,
}

const FAIL_COMMAND_FIELDS: &[&str] = &[
    "failCommands",
    "failAllCommands",
    "errorCode",
    "errorLabels",
    "errorExtraInfo",
    "closeConnection",
    "blockConnection",
    "blockTimeMS",
    "writeConcernError",
    "appName",
    "namespace",
    "failInternalCommands",
    "failLocalClients",
];

impl FailCommand {
    fn parse(data: &Document) -> Result<Self> {
        for field in data.keys() {
            if !FAIL_COMMAND_FIELDS.contains(&field.as_str()) {
                return Err(CommandError::new(
                    codes::INVALID_OPTIONS,
                    format!("failCommand data field '{field}' is not supported by this emulator"),
                ));
            }
        }
        let strings = |field: &str| -> Result<Option<Vec<String>>> {
            match data.get(field) {
                None => Ok(None),
                Some(Bson::Array(items)) => items
                    .iter()
                    .map(|i| {
                        i.as_str().map(str::to_string).ok_or_else(|| {
                            CommandError::type_mismatch(format!(
                                "'{field}' must be an array of strings"
                            ))
                        })
                    })
                    .collect::<Result<Vec<_>>>()
                    .map(Some),
                Some(_) => Err(CommandError::type_mismatch(format!(
                    "'{field}' must be an array"
                ))),
            }
        };
        let flag = |field: &str| data.get_bool(field).unwrap_or(false);
        let commands = strings("failCommands")?.unwrap_or_default();
        let fail_all = flag("failAllCommands");
        if commands.is_empty() && !fail_all {
            return Err(CommandError::new(
                codes::INVALID_OPTIONS,
                "failCommand fail point requires 'failCommands' (or 'failAllCommands')",
            ));
        }
        let block = if flag("blockConnection") {
            let ms = data.get("blockTimeMS").and_then(as_f64).ok_or_else(|| {
                CommandError::new(
                    codes::INVALID_OPTIONS,
                    "must specify 'blockTimeMS' when 'blockConnection' is true",
                )
            })?;
            if ms < 0.0 {
                return Err(CommandError::new(
                    codes::INVALID_OPTIONS,
                    "'blockTimeMS' must be non-negative",
                ));
            }
            Some(Duration::from_millis(ms as u64))
        } else {
            None
        };
        let error_code = match data.get("errorCode") {
            None => None,
            Some(v) => Some(
                as_f64(v)
                    .ok_or_else(|| CommandError::type_mismatch("'errorCode' must be a number"))?
                    as i32,
            ),
        };
        let document = |field: &str| -> Result<Option<Document>> {
            match data.get(field) {
                None => Ok(None),
                Some(Bson::Document(d)) => Ok(Some(d.clone())),
                Some(_) => Err(CommandError::type_mismatch(format!(
                    "'{field}' must be an object"
                ))),
            }
        };
        Ok(Self {
            commands,
            fail_all,
            error_code,
            error_labels: strings("errorLabels")?,
            error_extra_info: document("errorExtraInfo")?,
            close_connection: flag("closeConnection"),
            block,
            write_concern_error: document("writeConcernError")?,
            app_name: data.get_str("appName").ok().map(str::to_string),
            namespace: data.get_str("namespace").ok().map(str::to_string),
        })
    }

    fn applies_to(&self, command: &str, app_name: Option<&str>, ns: Option<&str>) -> bool {
        if command == "configureFailPoint" {
            return false;
        }
        if !self.fail_all && !self.commands.iter().any(|c| c == command) {
            return false;
        }
        if let Some(wanted) = &self.app_name
            && app_name != Some(wanted.as_str())
        {
            return false;
        }
        if let Some(wanted) = &self.namespace
            && ns != Some(wanted.as_str())
        {
            return false;
        }
        true
    }
}

/// What `failCommand` does to one command.
#[derive(Debug, Clone, Default)]
pub struct Injection {
    /// Sleep this long before going on.
    pub block: Option<Duration>,
    /// Close the connection without running the command.
    pub close_connection: bool,
    /// Fail with this error without running the command.
    pub error: Option<CommandError>,
    /// Run the command, then report this write concern error.
    pub write_concern_error: Option<Document>,
    /// Labels that replace the server's own on this reply.
    pub labels: Option<Vec<String>>,
}

/// What `onPrimaryTransactionalWrite` does to one retryable write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransactionalWriteFault {
    /// Close the connection instead of replying.
    pub close_connection: bool,
    /// Fail the write with this code before it commits (nothing is applied).
    pub fail_before_commit: Option<i32>,
}

#[derive(Debug)]
struct Armed<T> {
    mode: Mode,
    data: T,
    times_entered: i64,
}

/// The server's fail points.
#[derive(Debug, Default)]
pub struct FailPoints {
    fail_command: Mutex<Option<Armed<FailCommand>>>,
    on_primary_transactional_write: Mutex<Option<Armed<TransactionalWriteFault>>>,
    fail_get_more_after_cursor_checkout: Mutex<Option<Armed<i32>>>,
}

/// The code in a fail point's `data`, as mongod reads it (any number type).
fn data_code(data: &Document, field: &str) -> Result<Option<i32>> {
    match data.get(field) {
        None => Ok(None),
        Some(value) => as_f64(value)
            .filter(|n| n.fract() == 0.0 && *n >= f64::from(i32::MIN) && *n <= f64::from(i32::MAX))
            .map(|n| Some(n as i32))
            .ok_or_else(|| CommandError::type_mismatch(format!("'{field}' must be an integer"))),
    }
}

fn check_data_fields(fail_point: &str, data: &Document, known: &[&str]) -> Result<()> {
    for field in data.keys() {
        if !known.contains(&field.as_str()) {
            return Err(CommandError::new(
                codes::INVALID_OPTIONS,
                format!("{fail_point} data field '{field}' is not supported by this emulator"),
            ));
        }
    }
    Ok(())
}

fn arm<T>(slot: &Mutex<Option<Armed<T>>>, mode: Mode, data: T) -> i64 {
    let mut slot = slot.lock();
    let count = slot.as_ref().map_or(0, |a| a.times_entered);
    *slot = if mode == Mode::Off {
        None
    } else {
        Some(Armed {
            mode,
            data,
            times_entered: 0,
        })
    };
    count
}

/// Fires an armed fail point; returns its data when it fires.
fn fire<T: Clone>(slot: &Mutex<Option<Armed<T>>>) -> Option<T> {
    let mut slot = slot.lock();
    let armed = slot.as_mut()?;
    if !armed.mode.fire() {
        return None;
    }
    armed.times_entered += 1;
    Some(armed.data.clone())
}

impl FailPoints {
    /// `configureFailPoint`: sets a fail point; returns how often it had been entered.
    ///
    /// # Errors
    ///
    /// mongod's errors for a malformed command: `FailPointSetFailed` for an unknown fail
    /// point, `TypeMismatch` for a field of the wrong type, `InvalidOptions` for missing or
    /// unknown `data` fields.
    pub fn configure(&self, cmd: &Document) -> Result<i64> {
        let name = cmd.get_str("configureFailPoint").map_err(|_| {
            CommandError::type_mismatch("'configureFailPoint' must name a fail point")
        })?;
        let mode = Mode::parse(cmd.get("mode"))?;
        let data = match cmd.get("data") {
            None => Document::new(),
            Some(Bson::Document(d)) => d.clone(),
            Some(_) => {
                return Err(CommandError::type_mismatch(
                    "the 'data' field must be an object",
                ));
            }
        };
        match name {
            "failCommand" => {
                let mut slot = self.fail_command.lock();
                let count = slot.as_ref().map_or(0, |a| a.times_entered);
                *slot = if mode == Mode::Off {
                    None
                } else {
                    Some(Armed {
                        mode,
                        data: FailCommand::parse(&data)?,
                        times_entered: 0,
                    })
                };
                Ok(count)
            }
            "onPrimaryTransactionalWrite" => {
                check_data_fields(
                    name,
                    &data,
                    &["closeConnection", "failBeforeCommitExceptionCode"],
                )?;
                let close_connection = match data.get("closeConnection") {
                    None => true,
                    Some(Bson::Boolean(b)) => *b,
                    Some(_) => {
                        return Err(CommandError::type_mismatch(
                            "'closeConnection' must be a boolean",
                        ));
                    }
                };
                let fault = TransactionalWriteFault {
                    close_connection,
                    fail_before_commit: data_code(&data, "failBeforeCommitExceptionCode")?,
                };
                Ok(arm(&self.on_primary_transactional_write, mode, fault))
            }
            "failGetMoreAfterCursorCheckout" => {
                // mongod reads only `errorCode`; drivers' tests also pass `closeConnection:
                // false`, which it ignores.
                check_data_fields(name, &data, &["errorCode", "closeConnection"])?;
                let code = if mode == Mode::Off {
                    0
                } else {
                    data_code(&data, "errorCode")?.ok_or_else(|| {
                        CommandError::new(
                            codes::INVALID_OPTIONS,
                            "failGetMoreAfterCursorCheckout requires 'errorCode'",
                        )
                    })?
                };
                Ok(arm(&self.fail_get_more_after_cursor_checkout, mode, code))
            }
            other => Err(CommandError::new(
                codes::FAIL_POINT_SET_FAILED,
                format!("{other} not found"),
            )),
        }
    }

    /// What `failCommand` does to `command` on a connection with `app_name`.
    pub fn fail_command(
        &self,
        command: &str,
        app_name: Option<&str>,
        ns: Option<&str>,
    ) -> Option<Injection> {
        let mut slot = self.fail_command.lock();
        let armed = slot.as_mut()?;
        if !armed.data.applies_to(command, app_name, ns) {
            return None;
        }
        if !armed.mode.fire() {
            return None;
        }
        armed.times_entered += 1;
        let data = &armed.data;
        let injection = Injection {
            block: data.block,
            close_connection: data.close_connection,
            error: data.error_code.map(|code| {
                let mut error =
                    CommandError::new(code, "Failing command via 'failCommand' failpoint");
                if let Some(extra) = &data.error_extra_info {
                    error.extra = extra.clone();
                }
                error.labels = data.error_labels.clone();
                error
            }),
            write_concern_error: data.write_concern_error.clone(),
            labels: data.error_labels.clone(),
        };
        Some(injection)
    }

    /// What `onPrimaryTransactionalWrite` does to a retryable write about to execute.
    pub fn on_primary_transactional_write(&self) -> Option<TransactionalWriteFault> {
        fire(&self.on_primary_transactional_write)
    }

    /// The error a `getMore` fails with once its cursor is checked out, if any.
    pub fn fail_get_more_after_cursor_checkout(&self) -> Option<CommandError> {
        fire(&self.fail_get_more_after_cursor_checkout).map(|code| {
            CommandError::new(
                code,
                "Failing getMore via 'failGetMoreAfterCursorCheckout' failpoint",
            )
        })
    }
}
