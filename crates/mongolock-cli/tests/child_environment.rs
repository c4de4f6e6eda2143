//! The child of `exec` and `elect` sees the `MONGOLOCK_*` variables of its own lease only:
//! those an outer mongolock set (another lock's resource and token, an election's name and
//! term) are removed, so that a nested child cannot pair one lease's lock id with
//! another's token.

mod common;

use std::collections::BTreeMap;

use common::{Env, run, text};

/// Every variable an outer `exec` (one resource or several) or `elect` sets.
const OUTER: &[(&str, &str)] = &[
    ("MONGOLOCK_RESOURCE", "outer-resource"),
    ("MONGOLOCK_RESOURCES", "outer-a,outer-b"),
    ("MONGOLOCK_LOCK_ID", "outer-lock-id"),
    ("MONGOLOCK_FENCING_TOKEN", "-1"),
    ("MONGOLOCK_FENCING_TOKENS", "outer-a=-1,outer-b=-2"),
    ("MONGOLOCK_ELECTION", "outer-election"),
    ("MONGOLOCK_TERM", "-3"),
];

/// Runs `mongolock ARGS... -- env` with every variable of `OUTER` set, and returns the
/// child's `MONGOLOCK_*` variables.
async fn child_sees(env: &Env, args: &[&str]) -> BTreeMap<String, String> {
    let mut cmd = env.cmd(args);
    cmd.envs(OUTER.iter().copied()).args(["--", "env"]);
    let output = run(cmd).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    text(&output.stdout)
        .lines()
        .filter(|line| line.starts_with("MONGOLOCK_"))
        .filter_map(|line| line.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

/// The names of `seen`.
fn names(seen: &BTreeMap<String, String>) -> Vec<&str> {
    seen.keys().map(String::as_str).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_on_one_resource_clears_every_other_lease_variable() {
    let env = Env::start("childenv_one").await;
    let seen = child_sees(&env, &["exec", "--resource", "job"]).await;
    assert_eq!(
        names(&seen),
        [
            "MONGOLOCK_FENCING_TOKEN",
            "MONGOLOCK_LOCK_ID",
            "MONGOLOCK_RESOURCE"
        ],
        "{seen:?}"
    );
    assert_eq!(seen["MONGOLOCK_RESOURCE"], "job");
    assert_ne!(seen["MONGOLOCK_LOCK_ID"], "outer-lock-id");
    assert_ne!(seen["MONGOLOCK_FENCING_TOKEN"], "-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_on_several_resources_clears_every_other_lease_variable() {
    let env = Env::start("childenv_set").await;
    let seen = child_sees(&env, &["exec", "--resource", "a", "--resource", "b"]).await;
    assert_eq!(
        names(&seen),
        [
            "MONGOLOCK_FENCING_TOKENS",
            "MONGOLOCK_LOCK_ID",
            "MONGOLOCK_RESOURCES"
        ],
        "{seen:?}"
    );
    assert_eq!(seen["MONGOLOCK_RESOURCES"], "a,b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_clears_every_other_lease_variable() {
    let env = Env::start("childenv_elect").await;
    let seen = child_sees(&env, &["elect", "--name", "sched", "--value", "me"]).await;
    assert_eq!(
        names(&seen),
        ["MONGOLOCK_ELECTION", "MONGOLOCK_LOCK_ID", "MONGOLOCK_TERM"],
        "{seen:?}"
    );
    assert_eq!(seen["MONGOLOCK_ELECTION"], "sched");
    assert_ne!(seen["MONGOLOCK_TERM"], "-3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_variables_are_inherited() {
    let env = Env::start("childenv_other").await;
    let mut cmd = env.cmd(&["exec", "--resource", "job", "--", "env"]);
    cmd.env("MONGOLOCK_TEST_UNRELATED", "kept")
        .env("SOME_APP_SETTING", "kept too");
    let output = run(cmd).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(
        stdout.lines().any(|l| l == "SOME_APP_SETTING=kept too"),
        "{stdout}"
    );
    assert!(
        stdout.lines().any(|l| l == "MONGOLOCK_TEST_UNRELATED=kept"),
        "only the variables mongolock sets are cleared: {stdout}"
    );
}
