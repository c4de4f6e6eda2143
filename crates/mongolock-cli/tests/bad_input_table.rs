//! Bad input to the `mongolock` command, as one table: every subcommand with malformed flags,
//! missing arguments, servers that are not given, malformed or unreachable, and collections
//! holding documents of another shape.
//!
//! Each case names the exit status it must have (2 bad usage, 78 no server, 75 not acquired,
//! 1 any other error, 0 for a legal but odd input), words its message on stderr must contain,
//! and gets a collection of its own: the collection's documents (as BSON bytes, sorted) must
//! be the same after the command as before, and no output may contain a panic. A failing
//! case is collected with its name; the test prints them all, then fails if there is any.

mod common;

use std::time::Duration;

use bson::{Document, doc};
use common::{Env, run, text};
use futures_util::TryStreamExt;
use mongodb::Collection;
use mongolock::LockDetails;

/// Where a case's command is pointed.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// `--uri` of the test's emulator.
    Emulator,
    /// No `--uri` and no `MONGODB_URI`.
    Nothing,
    /// This `--uri`.
    Uri(&'static str),
    /// This `MONGODB_URI`, and no `--uri`.
    EnvUri(&'static str),
}

/// What the case's collection holds before the command.
#[derive(Debug, Clone, Copy)]
enum Seed {
    /// `held` locked exclusively by `holder`, and `sem` shared by `holder` with a cap of 3.
    Locks,
    /// As `Locks`, plus a document of another shape under `f`.
    Foreign,
}

/// One row of the table.
struct CliCase {
    name: String,
    target: Target,
    seed: Seed,
    args: Vec<String>,
    code: i32,
    /// Words stderr must contain.
    stderr: &'static [&'static str],
    /// Words stdout must contain; when empty, stdout must be empty for a failing command.
    stdout: &'static [&'static str],
}

/// A server that is not there: nothing listens on port 1, and the driver gives up selecting
/// a server after 300 ms.
const UNREACHABLE: &str =
    "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=300&connectTimeoutMS=300";

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

fn cases() -> Vec<CliCase> {
    let long_id = "x".repeat(mongolock::MAX_ID_LEN + 1);
    let long_label = "o".repeat(mongolock::MAX_LABEL_LEN + 1);
    let c = |name: &str, args: &[&str], code: i32, stderr: &'static [&'static str]| CliCase {
        name: name.to_owned(),
        target: Target::Emulator,
        seed: Seed::Locks,
        args: strings(args),
        code,
        stderr,
        stdout: &[],
    };
    let mut cases = vec![
        // Usage: clap refuses, status 2.
        c("no subcommand", &[], 2, &["Usage"]),
        c(
            "unknown subcommand",
            &["frobnicate"],
            2,
            &["unrecognized subcommand", "frobnicate"],
        ),
        c("unknown flag", &["status", "--bogus"], 2, &["--bogus"]),
        c("empty --db", &["--db", "", "status"], 2, &["--db"]),
        c(
            "status with a --db the server refuses",
            &["--db", "a.b", "status"],
            2,
            &["--db \"a.b\" is not a database name"],
        ),
        c(
            "exec with a --collection the server refuses",
            &[
                "--collection",
                "a$b",
                "exec",
                "--resource",
                "r",
                "--",
                "true",
            ],
            2,
            &["--collection \"a$b\""],
        ),
        c(
            "empty --collection",
            &["--collection", "", "status"],
            2,
            &["--collection"],
        ),
        c(
            "exec without COMMAND",
            &["exec", "--resource", "r"],
            2,
            &["<COMMAND>"],
        ),
        c(
            "exec with an empty COMMAND list",
            &["exec", "--resource", "r", "--"],
            2,
            &["<COMMAND>"],
        ),
        c(
            "exec without --resource",
            &["exec", "--", "true"],
            2,
            &["--resource"],
        ),
        c(
            "exec with an empty --resource",
            &["exec", "--resource", "", "--", "true"],
            2,
            &["--resource"],
        ),
        c(
            "exec --ttl abc",
            &["exec", "--resource", "r", "--ttl", "abc", "--", "true"],
            2,
            &["--ttl"],
        ),
        c(
            "exec --ttl without a unit",
            &["exec", "--resource", "r", "--ttl", "30", "--", "true"],
            2,
            &["--ttl"],
        ),
        c(
            "exec --ttl negative",
            &["exec", "--resource", "r", "--ttl=-1s", "--", "true"],
            2,
            &["--ttl"],
        ),
        c(
            "exec --ttl past u64 seconds",
            &[
                "exec",
                "--resource",
                "r",
                "--ttl",
                "18446744073709551616s",
                "--",
                "true",
            ],
            2,
            &["--ttl", "too large"],
        ),
        c(
            "exec --wait abc",
            &["exec", "--resource", "r", "--wait", "abc", "--", "true"],
            2,
            &["--wait"],
        ),
        c(
            "exec --kill-after abc",
            &[
                "exec",
                "--resource",
                "r",
                "--kill-after",
                "abc",
                "--",
                "true",
            ],
            2,
            &["--kill-after"],
        ),
        c(
            "exec --lock-delay abc",
            &[
                "exec",
                "--resource",
                "r",
                "--lock-delay",
                "abc",
                "--",
                "true",
            ],
            2,
            &["--lock-delay"],
        ),
        c(
            "exec --lock-id ''",
            &["exec", "--resource", "r", "--lock-id", "", "--", "true"],
            2,
            &["--lock-id"],
        ),
        c(
            "elect --lock-delay abc",
            &[
                "elect",
                "--name",
                "e",
                "--value",
                "v",
                "--lock-delay",
                "abc",
                "--",
                "true",
            ],
            2,
            &["--lock-delay"],
        ),
        c(
            "exec --wait with --no-wait",
            &[
                "exec",
                "--resource",
                "r",
                "--wait",
                "1s",
                "--no-wait",
                "--",
                "true",
            ],
            2,
            &["cannot be used with"],
        ),
        c(
            "exec --max without --shared",
            &["exec", "--resource", "r", "--max", "3", "--", "true"],
            2,
            &["--shared"],
        ),
        c(
            "exec --max 0",
            &[
                "exec",
                "--resource",
                "r",
                "--shared",
                "--max",
                "0",
                "--",
                "true",
            ],
            2,
            &["--max", "0"],
        ),
        c(
            "exec --max negative",
            &[
                "exec",
                "--resource",
                "r",
                "--shared",
                "--max=-1",
                "--",
                "true",
            ],
            2,
            &["--max"],
        ),
        c(
            "exec --max past u32",
            &[
                "exec",
                "--resource",
                "r",
                "--shared",
                "--max",
                "4294967296",
                "--",
                "true",
            ],
            2,
            &["--max"],
        ),
        c(
            "exec --shared with several --resource",
            &[
                "exec",
                "--resource",
                "a",
                "--resource",
                "b",
                "--shared",
                "--",
                "true",
            ],
            2,
            &["--shared takes one --resource", "Usage: mongolock exec"],
        ),
        c(
            "exec with several --resource, one with a comma",
            &["exec", "--resource", "a,b", "--resource", "c", "--", "true"],
            2,
            &["\"a,b\"", "must not contain"],
        ),
        c(
            "exec with several --resource, one empty",
            &["exec", "--resource", "a", "--resource", "", "--", "true"],
            2,
            &["--resource"],
        ),
        c(
            "elect without --value",
            &["elect", "--name", "n", "--", "true"],
            2,
            &["--value"],
        ),
        c(
            "elect with an empty --value",
            &["elect", "--name", "n", "--value", "", "--", "true"],
            2,
            &["--value"],
        ),
        c(
            "elect without --name",
            &["elect", "--value", "v", "--", "true"],
            2,
            &["--name"],
        ),
        c(
            "elect with an empty --name",
            &["elect", "--name", "", "--value", "v", "--", "true"],
            2,
            &["--name"],
        ),
        c(
            "elect without COMMAND",
            &["elect", "--name", "n", "--value", "v"],
            2,
            &["<COMMAND>"],
        ),
        c(
            "elect --wait with --no-wait",
            &[
                "elect",
                "--name",
                "n",
                "--value",
                "v",
                "--wait",
                "1s",
                "--no-wait",
                "--",
                "true",
            ],
            2,
            &["cannot be used with"],
        ),
        c(
            "elect --ttl abc",
            &[
                "elect", "--name", "n", "--value", "v", "--ttl", "abc", "--", "true",
            ],
            2,
            &["--ttl"],
        ),
        c("leader without --name", &["leader"], 2, &["--name"]),
        c(
            "leader with an empty --name",
            &["leader", "--name", ""],
            2,
            &["--name"],
        ),
        c(
            "status --resource without a value",
            &["status", "--resource"],
            2,
            &["--resource"],
        ),
        c("unlock without --lock-id", &["unlock"], 2, &["--lock-id"]),
        c(
            "completions without a shell",
            &["completions"],
            2,
            &["<SHELL>"],
        ),
        c(
            "completions for an unknown shell",
            &["completions", "tcsh"],
            2,
            &["invalid value 'tcsh'", "possible values"],
        ),
        c(
            "completions for an empty shell",
            &["completions", ""],
            2,
            &["a value is required for '<SHELL>'"],
        ),
        c(
            "man for an unknown subcommand",
            &["man", "frobnicate"],
            2,
            &["no page for \"frobnicate\"", "Usage: mongolock man"],
        ),
        c(
            "man for clap's help",
            &["man", "help"],
            2,
            &["no page for \"help\""],
        ),
        c(
            "unlock with an empty --lock-id",
            &["unlock", "--lock-id", ""],
            2,
            &["--lock-id"],
        ),
        c(
            "release without --force",
            &["release", "--resource", "held"],
            2,
            &["--force"],
        ),
        c(
            "release without --resource",
            &["release", "--force"],
            2,
            &["--resource"],
        ),
        c(
            "release with an empty --resource",
            &["release", "--resource", "", "--force"],
            2,
            &["--resource"],
        ),
        c("purge with an argument", &["purge", "now"], 2, &["now"]),
        c("indexes with an argument", &["indexes", "all"], 2, &["all"]),
        c(
            "demo --workers abc",
            &["demo", "--workers", "abc"],
            2,
            &["--workers"],
        ),
        c(
            "demo --seconds negative",
            &["demo", "--seconds=-1"],
            2,
            &["--seconds"],
        ),
        // Refused before connecting, as bad usage: status 2.
        c(
            "exec --ttl 0s",
            &["exec", "--resource", "r", "--ttl", "0s", "--", "true"],
            2,
            &["--ttl", "zero"],
        ),
        c(
            "exec --ttl below 50 ms",
            &["exec", "--resource", "r", "--ttl", "5ms", "--", "true"],
            2,
            &["--ttl 5ms is too short", "50ms"],
        ),
        c(
            "exec --ttl above the library's limit",
            &[
                "exec",
                "--resource",
                "r",
                "--ttl",
                "1000000000h",
                "--",
                "true",
            ],
            2,
            &["--ttl", "longer than the limit, 36500d"],
        ),
        c(
            "exec --wait past the clock with a bad --ttl",
            &[
                "exec",
                "--resource",
                "r",
                "--ttl",
                "5ms",
                "--wait",
                "18446744073709551615s",
                "--",
                "true",
            ],
            2,
            &["--ttl 5ms"],
        ),
        c(
            "exec --resource over the library's limit",
            &["exec", "--resource", &long_id, "--no-wait", "--", "true"],
            2,
            &["--resource", "the limit is 512 bytes"],
        ),
        c(
            "exec --resource over the library's limit, waiting",
            &["exec", "--resource", &long_id, "--wait", "1s", "--", "true"],
            2,
            &["--resource", "the limit is 512 bytes"],
        ),
        c(
            "exec --owner over the library's limit",
            &[
                "exec",
                "--resource",
                "r",
                "--owner",
                &long_label,
                "--no-wait",
                "--",
                "true",
            ],
            2,
            &["--owner", "the limit is 1024 bytes"],
        ),
        c(
            "exec --shared --max other than the stored cap",
            &[
                "exec",
                "--resource",
                "sem",
                "--shared",
                "--max",
                "2",
                "--no-wait",
                "--",
                "true",
            ],
            1,
            &["sem", "cap of 3, not 2"],
        ),
        c(
            "exec --shared --no-wait on a resource held exclusively",
            &[
                "exec",
                "--resource",
                "held",
                "--shared",
                "--no-wait",
                "--",
                "true",
            ],
            75,
            &["held by others"],
        ),
        c(
            "status --resource empty",
            &["status", "--resource", ""],
            2,
            &["--resource must not be empty"],
        ),
        c(
            "status --lock-id empty",
            &["status", "--lock-id", ""],
            2,
            &["--lock-id must not be empty"],
        ),
        c(
            "status --lock-id over the limit",
            &["status", "--lock-id", &long_id],
            2,
            &["--lock-id", "the limit is 512 bytes"],
        ),
        c(
            "status --owner over the library's limit",
            &["status", "--owner", &long_label],
            2,
            &["--owner", "the limit is 1024 bytes"],
        ),
        c(
            "unlock --lock-id over the limit",
            &["unlock", "--lock-id", &long_id],
            2,
            &["--lock-id", "the limit is 512 bytes"],
        ),
        c(
            "release --force --resource over the limit",
            &["release", "--resource", &long_id, "--force"],
            2,
            &["--resource", "the limit is 512 bytes"],
        ),
        c(
            "demo --workers 0",
            &["demo", "--workers", "0"],
            2,
            &["--workers must be between"],
        ),
        c(
            "demo --workers 65",
            &["demo", "--workers", "65"],
            2,
            &["--workers must be between"],
        ),
        c(
            "demo --seconds past the clock",
            &["demo", "--seconds", "18446744073709551615"],
            2,
            &["--seconds must be at most"],
        ),
        c(
            "elect --ttl 0s",
            &[
                "elect", "--name", "n", "--value", "v", "--ttl", "0s", "--", "true",
            ],
            2,
            &["--ttl", "zero"],
        ),
        c(
            "elect --ttl below 50 ms",
            &[
                "elect",
                "--name",
                "n",
                "--value",
                "v",
                "--ttl",
                "5ms",
                "--no-wait",
                "--",
                "true",
            ],
            2,
            &["--ttl 5ms is too short", "50ms"],
        ),
        c(
            "elect --value over the library's limit",
            &[
                "elect",
                "--name",
                "n",
                "--value",
                &long_label,
                "--no-wait",
                "--",
                "true",
            ],
            2,
            &["--value", "the limit is 1024 bytes"],
        ),
        c(
            "elect --name over the library's limit",
            &["elect", "--name", &long_id, "--value", "v", "--", "true"],
            2,
            &["--name", "the limit is 512 bytes"],
        ),
        c(
            "leader --name over the library's limit",
            &["leader", "--name", &long_id],
            2,
            &["--name", "the limit is 512 bytes"],
        ),
        // Held by another: not acquired, nothing written, status 75.
        c(
            "exec --no-wait on a held resource",
            &["exec", "--resource", "held", "--no-wait", "--", "true"],
            75,
            &["held by others"],
        ),
        c(
            "exec --wait 0s on a held resource",
            &["exec", "--resource", "held", "--wait", "0s", "--", "true"],
            75,
            &["held by others", "within"],
        ),
        c(
            "exec --no-wait on a set with a held member",
            &[
                "exec",
                "--resource",
                "zz",
                "--resource",
                "held",
                "--no-wait",
                "--",
                "true",
            ],
            75,
            &["held, zz: at least one is held by others"],
        ),
        c(
            "elect --no-wait on an election someone leads",
            &[
                "elect",
                "--name",
                "held",
                "--value",
                "v",
                "--no-wait",
                "--",
                "true",
            ],
            75,
            &["held is led by others"],
        ),
        c(
            "elect --wait 0s on an election someone leads",
            &[
                "elect", "--name", "held", "--value", "v", "--wait", "0s", "--", "true",
            ],
            75,
            &["led by others", "within"],
        ),
    ];

    // Legal but odd: documented outcomes, nothing changed.
    cases.extend([
        CliCase {
            stdout: &["released 0 lock(s) of lock id nobody"],
            ..c(
                "unlock of a lock id that holds nothing",
                &["unlock", "--lock-id", "nobody"],
                0,
                &[],
            )
        },
        CliCase {
            stdout: &["released 0 lock(s) on missing"],
            ..c(
                "release --force of a missing resource",
                &["release", "--resource", "missing", "--force"],
                0,
                &[],
            )
        },
        CliCase {
            stdout: &["\"released\":0"],
            ..c(
                "release --force --json of a missing resource",
                &["--json", "release", "--resource", "missing", "--force"],
                0,
                &[],
            )
        },
        CliCase {
            stdout: &["held: led by (no value) (term "],
            ..c(
                "leader of an election held by a plain lock without an owner",
                &["leader", "--name", "held"],
                0,
                &[],
            )
        },
        CliCase {
            stdout: &["\"has_leader\":false"],
            ..c(
                "leader --json of an election nobody leads",
                &["--json", "leader", "--name", "missing"],
                0,
                &[],
            )
        },
        CliCase {
            stdout: &["no locks"],
            ..c(
                "status of an owner nobody has",
                &["status", "--owner", ""],
                0,
                &[],
            )
        },
    ]);

    // Documents of another shape in the collection.
    let foreign = |case: CliCase| CliCase {
        seed: Seed::Foreign,
        ..case
    };
    cases.extend([
        foreign(c(
            "status on a collection with a foreign document",
            &["status"],
            1,
            &["not a mongolock document", "\"f\""],
        )),
        foreign(c(
            "status --json on a collection with a foreign document",
            &["--json", "status"],
            1,
            &["not a mongolock document", "\"f\""],
        )),
        foreign(c(
            "status --resource of the foreign document",
            &["status", "--resource", "f"],
            1,
            &["not a mongolock document"],
        )),
        foreign(c(
            "release --force of the foreign document",
            &["release", "--resource", "f", "--force"],
            1,
            &["cannot release the locks on f", "not a mongolock document"],
        )),
        foreign(c(
            "exec --no-wait on the foreign document",
            &["exec", "--resource", "f", "--no-wait", "--", "true"],
            1,
            &["cannot acquire a lock on f", "not a mongolock document"],
        )),
        foreign(c(
            "exec --shared --max on the foreign document",
            &[
                "exec",
                "--resource",
                "f",
                "--shared",
                "--max",
                "2",
                "--wait",
                "1s",
                "--",
                "true",
            ],
            1,
            &["cannot acquire a lock on f", "not a mongolock document"],
        )),
        foreign(c(
            "exec of a set with the foreign document",
            &[
                "exec",
                "--resource",
                "g",
                "--resource",
                "f",
                "--no-wait",
                "--",
                "true",
            ],
            1,
            &["cannot acquire a lock on f, g", "not a mongolock document"],
        )),
        foreign(c(
            "elect in the foreign document",
            &["elect", "--name", "f", "--value", "v", "--", "true"],
            1,
            &["cannot campaign in f", "not a mongolock document"],
        )),
        foreign(c(
            "leader of the foreign document",
            &["leader", "--name", "f"],
            1,
            &["cannot read the leader of f", "not a mongolock document"],
        )),
        foreign(CliCase {
            stdout: &["removed expired locks from 0 resource(s)"],
            ..c(
                "purge on a collection with a foreign document",
                &["purge"],
                0,
                &[],
            )
        }),
        foreign(CliCase {
            stdout: &["released 0 lock(s)"],
            ..c(
                "unlock of the lock id in the foreign document",
                &["unlock", "--lock-id", "a"],
                0,
                &[],
            )
        }),
    ]);

    // No server, a malformed one, one that is not there.
    let aimed = |target: Target, case: CliCase| CliCase { target, ..case };
    for (what, args) in [
        ("status", &["status"][..]),
        ("unlock", &["unlock", "--lock-id", "x"]),
        ("release", &["release", "--resource", "r", "--force"]),
        ("purge", &["purge"]),
        ("indexes", &["indexes"]),
        ("exec", &["exec", "--resource", "r", "--", "true"]),
        (
            "exec of a set",
            &["exec", "--resource", "r", "--resource", "s", "--", "true"],
        ),
        (
            "elect",
            &["elect", "--name", "n", "--value", "v", "--", "true"],
        ),
        ("leader", &["leader", "--name", "n"]),
        ("leader --watch", &["leader", "--name", "n", "--watch"]),
    ] {
        let name = |s: &str| format!("{what}: {s}");
        cases.push(aimed(
            Target::Nothing,
            c(
                &name("no server given"),
                args,
                78,
                &["no MongoDB server given", "MONGODB_URI"],
            ),
        ));
        cases.push(aimed(
            Target::Uri(""),
            c(
                &name("an empty --uri"),
                args,
                78,
                &["no MongoDB server given"],
            ),
        ));
        cases.push(aimed(
            Target::Uri("not-a-uri"),
            c(
                &name("a --uri without a scheme"),
                args,
                1,
                &["cannot use the connection string", "scheme"],
            ),
        ));
        cases.push(aimed(
            Target::Uri("mongodb://"),
            c(
                &name("a --uri without a host"),
                args,
                1,
                &["cannot use the connection string", "hostname"],
            ),
        ));
        cases.push(aimed(
            Target::EnvUri("mongodb://host:notaport"),
            c(
                &name("a malformed MONGODB_URI"),
                args,
                1,
                &["cannot use the connection string", "port"],
            ),
        ));
        cases.push(aimed(
            Target::Uri(UNREACHABLE),
            c(
                &name("a server that is not there"),
                args,
                1,
                &["cannot reach the server 127.0.0.1:1", "Connection refused"],
            ),
        ));
    }
    cases
}

/// The command for `case`, on `collection` of the test's database (unless the case gives
/// `--db` or `--collection` itself: a flag given twice is a usage error of its own).
fn command(env: &Env, case: &CliCase, collection: &str) -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("mongolock").expect("the binary is built");
    cmd.env_remove("MONGODB_URI")
        .timeout(Duration::from_secs(60));
    match case.target {
        Target::Emulator => {
            cmd.args(["--uri", &env.server.uri()]);
        }
        Target::Uri(uri) => {
            cmd.args(["--uri", uri]);
        }
        Target::EnvUri(uri) => {
            cmd.env("MONGODB_URI", uri);
        }
        Target::Nothing => {}
    }
    let gives = |flag: &str| case.args.iter().any(|a| a == flag);
    if !gives("--db") {
        cmd.args(["--db", &env.db]);
    }
    if !gives("--collection") {
        cmd.args(["--collection", collection]);
    }
    cmd.args(&case.args);
    cmd
}

/// The collection's documents as BSON bytes, sorted.
async fn snapshot(collection: &Collection<Document>) -> Vec<Vec<u8>> {
    let documents: Vec<Document> = collection
        .find(doc! {})
        .await
        .expect("find")
        .try_collect()
        .await
        .expect("read every document");
    let mut bytes: Vec<Vec<u8>> = documents
        .iter()
        .map(|d| bson::to_vec(d).expect("a document serialises"))
        .collect();
    bytes.sort();
    bytes
}

async fn seed(collection: &Collection<Document>, seed: Seed) {
    let locks = mongolock::LockClient::new(collection.clone());
    let _held = locks
        .xlock("held", "holder", LockDetails::default())
        .await
        .expect("seed held");
    let _sem = locks
        .slock("sem", "holder", LockDetails::default(), Some(3))
        .await
        .expect("seed sem");
    if let Seed::Foreign = seed {
        collection
            .insert_one(doc! {
                "_id": "f", "resource": "f",
                "exclusive": { "lockId": "a", "acquired": true },
                "shared": { "count": 0, "locks": [] },
            })
            .await
            .expect("seed the foreign document");
    }
}

/// What is wrong with `case`'s run, if anything.
fn judge(case: &CliCase, output: &std::process::Output) -> Vec<String> {
    let mut wrong = Vec::new();
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    if output.status.code() != Some(case.code) {
        wrong.push(format!(
            "exit status {:?}, expected {}",
            output.status.code(),
            case.code
        ));
    }
    for word in case.stderr {
        if !stderr.contains(word) {
            wrong.push(format!("stderr does not mention {word:?}"));
        }
    }
    for word in case.stdout {
        if !stdout.contains(word) {
            wrong.push(format!("stdout does not mention {word:?}"));
        }
    }
    if case.stdout.is_empty() && case.code != 0 && !stdout.is_empty() {
        wrong.push("a failing command wrote to stdout".to_owned());
    }
    if case.code != 0 && stderr.trim().is_empty() {
        wrong.push("a failing command said nothing on stderr".to_owned());
    }
    for stream in [&stdout, &stderr] {
        if stream.contains("panicked at") || stream.contains("RUST_BACKTRACE") {
            wrong.push("a panic".to_owned());
        }
    }
    if !wrong.is_empty() {
        let excerpt: String = stderr.chars().take(400).collect();
        wrong.push(format!("stderr was: {excerpt}"));
    }
    wrong
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_subcommand_refuses_bad_input_with_a_message_and_changes_nothing() {
    let env = Env::start("clibad").await;
    let db = env.server.client().database(&env.db);
    let cases = cases();
    let count = cases.len();
    let mut ran = 0;
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let name = format!("c{i:03}");
        let collection = db.collection::<Document>(&name);
        seed(&collection, case.seed).await;
        let before = snapshot(&collection).await;
        let output = run(command(&env, case, &name)).await;
        ran += 1;
        let mut wrong = judge(case, &output);
        if snapshot(&collection).await != before {
            wrong.push("the collection changed".to_owned());
        }
        if !wrong.is_empty() {
            failures.push(format!(
                "{} ({:?}): {}",
                case.name,
                case.args,
                wrong.join("; ")
            ));
        }
    }
    println!("command line: {ran} cases run, {} failed", failures.len());
    for failure in &failures {
        println!("  FAILED {failure}");
    }
    assert_eq!(ran, count, "every case runs");
    assert!(
        failures.is_empty(),
        "{} of {ran} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A `--kill-after` past what the clock can represent: when the lease is lost, the child is
/// sent SIGTERM and the command exits 79, without a panic (the SIGKILL deadline never comes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_after_past_the_clock_stops_the_child_without_a_panic() {
    let env = Env::start("clikillafter").await;
    let locks = env.locks();
    let child = env.spawn(&[
        "exec",
        "--resource",
        "k",
        "--ttl",
        "1s",
        "--kill-after",
        "18446744073709551615s",
        "--",
        "sleep",
        "30",
    ]);
    let held = common::eventually(Duration::from_secs(30), || async {
        !locks
            .status(&mongolock::Filter::default().resource("k"))
            .await
            .expect("status")
            .is_empty()
    })
    .await;
    assert!(held, "the command took the lock");
    assert_eq!(locks.force_release("k").await.expect("force release"), 1);
    let output = common::wait_output(child, Duration::from_secs(30)).await;
    let stderr = text(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(output.status.code(), Some(79), "{stderr}");
    assert!(stderr.contains("lease on k lost"), "{stderr}");
}
