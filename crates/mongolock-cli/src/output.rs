//! What reaches the terminal, made safe to print.
//!
//! - Stored strings (owners, hosts, an election's value, resource names) are written by
//!   whichever client took a lock. In text output they are [`escape`]d: control characters
//!   (C0, DEL, C1), line breaks and bidi controls become visible escapes (`\n`, `\u{1b}`,
//!   `\u{202e}`), so that they cannot add lines, forge rows or act on the terminal. `--json`
//!   output keeps them as they are (JSON escapes the control characters).
//! - No piece of a connection string's user info is ever printed. Connection strings are
//!   shown [`redacted`](crate::uri::redacted), the driver's message about one that does not
//!   parse is never printed, and on top of that every message on stderr (errors, warnings,
//!   the logs of `-v`, the prompt, the progress line), the demo's narration and a panic's
//!   message are [`scrub`]bed: any run of [`MIN_RUN`] or more characters that also appears
//!   in the user info, as written or percent-decoded, is replaced by `***`.
//!
//! The user info to keep secret is taken, before the command line is parsed, from the
//! `--uri` argument, from `MONGODB_URI`, and from any argument holding a string with
//! `://` and `@` (a connection string typed in the wrong place).

use std::borrow::Cow;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::OnceLock;

use crate::uri;

/// The shortest run of characters of a user info that is scrubbed: shorter runs are too
/// common to remove from every message. Within the user name, only the whole name is
/// scrubbed (a piece of a user name is often a piece of a word the messages use).
pub const MIN_RUN: usize = 4;

/// What replaces a scrubbed run.
const SCRUBBED: &str = "***";

/// Whether `c` is written escaped in text output: control characters (C0, DEL, C1), the
/// line and paragraph separators, and the bidi controls (marks, embeddings, overrides,
/// isolates).
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// `text` for a terminal: every character [`needs_escape`] says so written as `\n`, `\r`,
/// `\t` or `\u{HEX}`, the rest as it is.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// One form of a user info to keep secret.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Secret {
    /// The user info (`user:password`), as written or percent-decoded.
    chars: Vec<char>,
    /// How many of its characters are the user name (before the first `:`).
    name_len: usize,
}

impl Secret {
    /// The secret for `user_info`.
    fn new(user_info: &str) -> Secret {
        let chars: Vec<char> = user_info.chars().collect();
        let name_len = chars.iter().position(|&c| c == ':').unwrap_or(chars.len());
        Secret { chars, name_len }
    }

    /// The longest run of `text` from its start that is a part of this secret worth
    /// scrubbing: at least [`MIN_RUN`] characters, and either past the user name or the
    /// whole user name.
    fn longest_run(&self, text: &[char]) -> usize {
        let mut longest = 0;
        for start in 0..self.chars.len() {
            let len = self.chars[start..]
                .iter()
                .zip(text)
                .take_while(|(a, b)| a == b)
                .count();
            // Past the user name, any run counts; within it, only the whole of it.
            let counts = start + len > self.name_len || (start == 0 && len == self.name_len);
            if counts && len >= MIN_RUN {
                longest = longest.max(len);
            }
        }
        longest
    }
}

/// The user infos to keep secret, set once by [`protect`].
static SECRETS: OnceLock<Vec<Secret>> = OnceLock::new();

/// Keeps secret the user info of every connection string among `args` (the command line:
/// the value of `--uri`, and any argument with `://` and `@`) and `env_uri`
/// (`MONGODB_URI`). Call it first: until then nothing is scrubbed.
pub fn protect(args: impl IntoIterator<Item = OsString>, env_uri: Option<OsString>) {
    let _ = SECRETS.set(secrets(&user_infos(args, env_uri)));
}

/// The user infos [`protect`] keeps secret.
fn user_infos(args: impl IntoIterator<Item = OsString>, env_uri: Option<OsString>) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut after_uri_flag = false;
    for arg in args {
        let arg = arg.to_string_lossy().into_owned();
        if after_uri_flag {
            found.extend(uri::split(&arg).user_info.map(str::to_owned));
        } else if let Some(value) = arg.strip_prefix("--uri=") {
            found.extend(uri::split(value).user_info.map(str::to_owned));
        } else if let Some((_, after)) = arg.split_once("://")
            && let Some((user_info, _)) = after.rsplit_once('@')
        {
            found.push(user_info.to_owned());
        }
        after_uri_flag = arg == "--uri";
    }
    if let Some(env_uri) = env_uri {
        found.extend(
            uri::split(&env_uri.to_string_lossy())
                .user_info
                .map(str::to_owned),
        );
    }
    found
}

/// The forms of `user_infos` to scrub: each as written and percent-decoded.
fn secrets(user_infos: &[String]) -> Vec<Secret> {
    let mut secrets = Vec::new();
    for user_info in user_infos.iter().filter(|u| !u.is_empty()) {
        for form in [user_info.clone(), percent_decoded(user_info)] {
            let secret = Secret::new(&form);
            if !secrets.contains(&secret) {
                secrets.push(secret);
            }
        }
    }
    secrets
}

/// `text` with its `%XX` escapes decoded (an escape that is not one is kept as it is).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `text` with every run that is a piece of a protected user info (see [`protect`])
/// replaced by `***`.
pub fn scrub(text: &str) -> Cow<'_, str> {
    scrub_with(SECRETS.get().map_or(&[], Vec::as_slice), text)
}

/// [`scrub`] with these secrets.
fn scrub_with<'a>(secrets: &[Secret], text: &'a str) -> Cow<'a, str> {
    if secrets.is_empty() || text.chars().count() < MIN_RUN {
        return Cow::Borrowed(text);
    }
    let chars: Vec<char> = text.chars().collect();
    let mut hidden = vec![false; chars.len()];
    for start in 0..chars.len() {
        let len = (secrets.iter())
            .map(|secret| secret.longest_run(&chars[start..]))
            .max()
            .unwrap_or(0);
        hidden[start..start + len]
            .iter_mut()
            .for_each(|h| *h = true);
    }
    if !hidden.contains(&true) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    for (i, &c) in chars.iter().enumerate() {
        match (hidden[i], i > 0 && hidden[i - 1]) {
            (false, _) => out.push(c),
            (true, false) => out.push_str(SCRUBBED),
            (true, true) => {}
        }
    }
    Cow::Owned(out)
}

/// Every string of a JSON document [`scrub`]bed (the document stays valid JSON).
pub fn scrub_json(value: &mut serde_json::Value) {
    scrub_json_with(SECRETS.get().map_or(&[], Vec::as_slice), value);
}

/// [`scrub_json`] with these secrets.
fn scrub_json_with(secrets: &[Secret], value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(text) => {
            if let Cow::Owned(scrubbed) = scrub_with(secrets, text) {
                *text = scrubbed;
            }
        }
        serde_json::Value::Array(items) => {
            items
                .iter_mut()
                .for_each(|item| scrub_json_with(secrets, item));
        }
        serde_json::Value::Object(fields) => {
            (fields.values_mut()).for_each(|field| scrub_json_with(secrets, field));
        }
        _ => {}
    }
}

/// A message for stderr: [`scrub`]bed, then [`escape`]d (one line, whatever it holds).
pub fn message(text: &str) -> String {
    escape(&scrub(text)).into_owned()
}

/// Prints `mongolock: TEXT` on stderr, TEXT made a safe [`message`].
pub fn complain_line(text: &str) {
    eprintln!("mongolock: {}", message(text));
}

/// Prints `mongolock: ...` on stderr, formatted as `format!` does, as [`complain_line`] does.
macro_rules! complain {
    ($($arg:tt)*) => {
        $crate::output::complain_line(&format!($($arg)*))
    };
}
pub(crate) use complain;

/// Exits for a usage error found by clap, as `error.exit()` does, but with any piece of a
/// protected user info the message quotes scrubbed (clap quotes an argument it did not
/// expect, which may be a connection string typed in the wrong place).
pub fn exit_usage(error: &clap::Error) -> ! {
    use clap::error::ErrorKind;
    // Help and version texts are the command's own.
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        error.exit();
    }
    let rendered = error.render().to_string();
    match scrub(&rendered) {
        Cow::Borrowed(_) => error.exit(),
        Cow::Owned(scrubbed) => {
            let mut stderr = std::io::stderr().lock();
            let _ = stderr.write_all(scrubbed.as_bytes());
            let _ = stderr.flush();
            std::process::exit(error.exit_code())
        }
    }
}

/// Where the logs of `-v` go: stderr, one event at a time, [`scrub`]bed and [`escape`]d
/// but for the event's final line break, so that no field can add a line or act on the
/// terminal.
#[derive(Debug, Clone, Copy, Default)]
pub struct Logs;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = LogEvent;

    fn make_writer(&'a self) -> LogEvent {
        LogEvent(Vec::new())
    }
}

/// One log event, written to stderr when dropped (the formatter writes each event to a
/// writer of its own, then drops it).
#[derive(Debug)]
pub struct LogEvent(Vec<u8>);

impl std::io::Write for LogEvent {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogEvent {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&self.0);
        let event = text.strip_suffix('\n').unwrap_or(&text);
        let _ = writeln!(std::io::stderr().lock(), "{}", message(event));
    }
}

/// Replaces the panic message printer with one that scrubs and escapes the message (a
/// panic's message may quote an error). It still says `panicked at`, and honours
/// `RUST_BACKTRACE`.
pub fn scrub_panics() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info
            .payload()
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| info.payload().downcast_ref::<String>().map(String::as_str))
            .unwrap_or("Box<dyn Any>");
        let at = info
            .location()
            .map_or_else(String::new, |at| format!(" at {at}"));
        let thread = std::thread::current();
        let mut stderr = std::io::stderr().lock();
        let _ = writeln!(
            stderr,
            "\nthread '{}' panicked{at}:\n{}",
            thread.name().unwrap_or("<unnamed>"),
            message(payload)
        );
        let backtrace = std::backtrace::Backtrace::capture();
        if backtrace.status() == std::backtrace::BacktraceStatus::Captured {
            let _ = writeln!(stderr, "{}", scrub(&backtrace.to_string()));
        } else {
            let _ = writeln!(
                stderr,
                "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace"
            );
        }
    }));
}

/// Logs to stderr at the level asked for with `-v` (`verbose` times); nothing by default.
/// Each event is written scrubbed and escaped ([`Logs`]), without colours (an escape
/// sequence in a field could not be told from the formatter's own).
pub fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => return,
        1 => "mongolock=info",
        2 => "mongolock=debug",
        _ => "debug",
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(level))
        .with_writer(Logs)
        .with_ansi(false)
        .try_init();
}

/// Whether stderr is a terminal (progress lines and prompts only then).
pub fn stderr_is_terminal() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// An error and its causes on one line, as `{:#}` joins them, except that a driver error is
/// told by its kind (for a server's refusal: the code, its name and the server's message)
/// rather than with the labels and the raw reply its own `Display` adds.
pub fn describe(error: &anyhow::Error) -> String {
    let causes: Vec<String> = error
        .chain()
        .map(
            |cause| match cause.downcast_ref::<mongodb::error::Error>() {
                Some(driver) => driver.kind.to_string(),
                None => cause.to_string(),
            },
        )
        .collect();
    causes.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_makes_controls_line_breaks_and_bidi_visible() {
        assert_eq!(escape("plain text, é, 漢字"), "plain text, é, 漢字");
        assert!(matches!(escape("plain"), Cow::Borrowed(_)));
        assert_eq!(
            escape("a\nb\r\tc\x1b[31m\x7f\u{9b}\u{202e}\u{2066}\u{2028}d"),
            r"a\nb\r\tc\u{1b}[31m\u{7f}\u{9b}\u{202e}\u{2066}\u{2028}d"
        );
    }

    fn secrets_of(user_infos: &[&str]) -> Vec<Secret> {
        secrets(
            &user_infos
                .iter()
                .map(|u| (*u).to_owned())
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn scrub_removes_every_long_enough_piece_of_the_password() {
        let secrets = secrets_of(&["alice:1234?S3cretPw0rd"]);
        assert_eq!(
            scrub_with(&secrets, "not a 'key=value' pair: S3cretPw0rd@127.0.0.1:1/"),
            "not a 'key=value' pair: ***@127.0.0.1:1/"
        );
        assert_eq!(
            scrub_with(&secrets, "port: got alice:1234, then Pw0rd"),
            "port: got ***, then ***"
        );
        assert_eq!(
            scrub_with(&secrets, "nothing of it here: 123 Pw0"),
            "nothing of it here: 123 Pw0"
        );
    }

    #[test]
    fn scrub_removes_the_user_name_only_whole() {
        let secrets = secrets_of(&["mongolock:S3cretPw0rd"]);
        assert_eq!(
            scrub_with(&secrets, "released 1 lock(s) of user mongolock"),
            "released 1 lock(s) of user ***"
        );
    }

    #[test]
    fn scrub_knows_the_percent_decoded_form() {
        let secrets = secrets_of(&["bob:p%40ss%3Fw0rd%zz"]);
        assert_eq!(
            scrub_with(&secrets, "password p@ss?w0rd%zz refused"),
            "password *** refused"
        );
        assert_eq!(percent_decoded("a%2Fb%zz%4"), "a/b%zz%4");
    }

    #[test]
    fn protect_reads_the_uri_argument_the_environment_and_stray_connection_strings() {
        let args = |list: &[&str]| -> Vec<OsString> { list.iter().map(OsString::from).collect() };
        let found = user_infos(
            args(&[
                "mongolock",
                "--uri",
                "u1:p1@h",
                "--uri=mongodb://u2:p?2@h",
                "--owner",
                "me@example.com",
                "mongodb+srv://u3:p/3@h",
                "--",
                "curl",
                "https://u4:p4@example.com/x",
            ]),
            Some(OsString::from("mongodb://u5:p@5@h/?x=y")),
        );
        assert_eq!(found, ["u1:p1", "u2:p?2", "u3:p/3", "u4:p4", "u5:p@5"]);
    }

    #[test]
    fn json_stays_json_when_scrubbed() {
        let secrets = secrets_of(&["u:ab\"cd\\efg"]);
        let mut value =
            serde_json::json!({ "error": "refused: ab\"cd\\efg", "n": 1, "list": ["xcd\\efgx"] });
        scrub_json_with(&secrets, &mut value);
        assert_eq!(
            value,
            serde_json::json!({ "error": "refused: ***", "n": 1, "list": ["x***x"] })
        );
    }
}
