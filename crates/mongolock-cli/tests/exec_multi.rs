//! `mongolock exec` with several `--resource` as a process, against the emulator: the set is
//! held as a whole while the child runs and freed after, a refused member leaves nothing
//! held, the child's environment names every member, and a lost member stops the child.

mod common;

use std::time::Duration;

use common::{Env, eventually, run, temp_dir, text, wait_output};
use mongolock::Filter;
use tokio::io::{AsyncBufReadExt as _, BufReader};

/// Generous bound for a process that should end soon; a wrong mechanism (a child left
/// running, a lock never released) exceeds it.
const SOON: Duration = Duration::from_secs(15);

/// `mongolock --uri URI --db DB ARGS...` started with `MONGOLOCK_RESOURCE` and
/// `MONGOLOCK_FENCING_TOKEN` set as an outer single-resource `exec` would have set them.
fn spawn_inside_an_outer_exec(env: &Env, args: &[&str]) -> tokio::process::Child {
    let outer = [
        ("MONGOLOCK_RESOURCE", "outer"),
        ("MONGOLOCK_FENCING_TOKEN", "-1"),
    ];
    env.spawn_with_env(&outer, args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_resources_are_held_together_while_the_child_runs_and_freed_after() {
    let env = Env::start("multi_held").await;
    let locks = env.locks();
    let dir = temp_dir("multi_held");
    let (ready, go, seen) = (dir.join("ready"), dir.join("go"), dir.join("env"));
    let script = format!(
        "echo \"$MONGOLOCK_RESOURCES|$MONGOLOCK_LOCK_ID|$MONGOLOCK_FENCING_TOKENS|\
         ${{MONGOLOCK_RESOURCE-unset}}|${{MONGOLOCK_FENCING_TOKEN-unset}}\" > {seen}; \
         touch {ready}; while [ ! -e {go} ]; do sleep 0.05; done",
        seen = seen.display(),
        ready = ready.display(),
        go = go.display()
    );
    // Named out of order, and one twice: the set is {a, b}.
    let exec = spawn_inside_an_outer_exec(
        &env,
        &[
            "--json",
            "exec",
            "--resource",
            "b",
            "--resource",
            "a",
            "--resource",
            "b",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    assert!(
        eventually(SOON, || async { ready.exists() }).await,
        "the child started"
    );

    // While the child runs, nobody else can take either resource.
    for resource in ["a", "b"] {
        assert!(
            locks.mutex(resource).try_acquire().await.unwrap().is_none(),
            "{resource} is held while the child runs"
        );
        let output =
            run(env.cmd(&["exec", "--resource", resource, "--no-wait", "--", "true"])).await;
        assert_eq!(
            output.status.code(),
            Some(75),
            "another process cannot take {resource}: {}",
            text(&output.stderr)
        );
    }
    let held = locks.status(&Filter::default()).await.unwrap();
    assert_eq!(held.len(), 2, "one lock per resource: {held:?}");
    let token = |resource: &str| {
        held.iter()
            .find(|lock| lock.resource() == resource)
            .unwrap_or_else(|| panic!("{resource} is held: {held:?}"))
            .fencing_token()
    };
    let lock_id = held[0].lock_id().to_owned();
    assert_eq!(held[1].lock_id(), lock_id, "one lock id for the set");

    // The child's environment names the set, its lock id and each token.
    let line = std::fs::read_to_string(&seen).expect("the child wrote its environment");
    let fields: Vec<&str> = line.trim().split('|').collect();
    let tokens = format!("a={},b={}", token("a"), token("b"));
    assert_eq!(
        fields,
        ["a,b", lock_id.as_str(), tokens.as_str(), "unset", "unset"],
        "{line}"
    );

    std::fs::write(&go, "").unwrap();
    let output = wait_output(exec, SOON).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["resources"], serde_json::json!(["a", "b"]));
    assert_eq!(report["resource"], "a,b");
    assert_eq!(report["kind"], "exclusive");
    assert_eq!(report["acquired"], true);
    assert_eq!(report["lock_id"], lock_id.as_str());
    assert_eq!(report["fencing_token"], serde_json::Value::Null);
    assert_eq!(
        report["fencing_tokens"],
        serde_json::json!({ "a": token("a"), "b": token("b") })
    );
    assert_eq!(report["released"], true);
    assert_eq!(report["lost"], false);

    // Both freed at once (released, not left to the 30 s TTL).
    assert!(
        locks.status(&Filter::default()).await.unwrap().is_empty(),
        "both released"
    );
    for resource in ["a", "b"] {
        let guard = locks.mutex(resource).try_acquire().await.unwrap();
        assert!(guard.is_some(), "{resource} is free after the child");
    }
    locks.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_with_one_member_held_is_not_acquired_and_leaves_the_other_free() {
    let env = Env::start("multi_refused").await;
    let locks = env.locks();
    let held = locks.mutex("b").owner("the test").acquire().await.unwrap();
    let dir = temp_dir("multi_refused");
    let marker = dir.join("ran");
    let touch = format!("touch {}", marker.display());

    let output = run(env.cmd(&[
        "exec",
        "--resource",
        "a",
        "--resource",
        "b",
        "--no-wait",
        "--",
        "sh",
        "-c",
        &touch,
    ]))
    .await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(75), "{stderr}");
    assert!(stderr.contains("held by others"), "{stderr}");
    assert!(!marker.exists(), "the child did not run");
    let locked = locks.status(&Filter::default()).await.unwrap();
    assert_eq!(locked.len(), 1, "only the test's lock on b: {locked:?}");
    assert_eq!(locked[0].resource(), "b");
    assert_eq!(locked[0].lock_id(), held.lock_id());
    let a = locks.mutex("a").try_acquire().await.unwrap();
    assert!(a.is_some(), "a was left free");
    a.unwrap().release().await.unwrap();

    // --wait gives up too, after waiting, and says so in the report.
    let output = run(env.cmd(&[
        "--json",
        "exec",
        "--resource",
        "a",
        "--resource",
        "b",
        "--wait",
        "300ms",
        "--",
        "sh",
        "-c",
        &touch,
    ]))
    .await;
    assert_eq!(output.status.code(), Some(75), "{}", text(&output.stderr));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["acquired"], false);
    assert_eq!(report["resources"], serde_json::json!(["a", "b"]));
    assert_eq!(report["exit_status"], 75);
    assert!(!marker.exists(), "the child did not run");
    let a = locks.mutex("a").try_acquire().await.unwrap();
    assert!(a.is_some(), "a was left free after waiting");
    a.unwrap().release().await.unwrap();

    // Free now: the set is taken and the child runs.
    held.release().await.unwrap();
    let output = run(env.cmd(&[
        "exec",
        "--resource",
        "a",
        "--resource",
        "b",
        "--no-wait",
        "--",
        "sh",
        "-c",
        &touch,
    ]))
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(marker.exists(), "free now: the child ran");
    locks.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_one_member_of_the_set_stops_the_child_and_frees_the_rest() {
    let env = Env::start("multi_lost").await;
    let locks = env.locks();
    let dir = temp_dir("multi_lost");
    let pid_file = dir.join("pid");
    let script = format!("echo $$ > {}; exec sleep 30", pid_file.display());
    let exec = env.spawn(&[
        "--json",
        "exec",
        "--resource",
        "a",
        "--resource",
        "b",
        "--ttl",
        "2s",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert!(
        eventually(SOON, || async { pid_file.exists() }).await,
        "the child started"
    );
    assert_eq!(locks.force_release("b").await.unwrap(), 1);

    let output = wait_output(exec, SOON).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(79), "{stderr}");
    assert!(
        stderr.contains("lease on b (one of a, b) lost (revoked"),
        "the member and the reason are given: {stderr}"
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["lost"], true);
    assert_eq!(report["loss_reason"], "revoked");
    assert_eq!(report["child_signal"], 15, "SIGTERM stopped it");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH),
        "the child is gone"
    );
    let left = locks.status(&Filter::default()).await.unwrap();
    assert!(left.is_empty(), "a was released too: {left:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_set_is_taken_once_its_held_member_is_released() {
    let env = Env::start("multi_wait").await;
    let locks = env.locks();
    let held = locks.mutex("b").acquire().await.unwrap();
    // -v logs "waiting for the lock" once it is about to wait.
    let mut exec = env.spawn(&[
        "-v",
        "exec",
        "--resource",
        "a",
        "--resource",
        "b",
        "--wait",
        "1m",
        "--",
        "sh",
        "-c",
        "echo $MONGOLOCK_FENCING_TOKENS",
    ]);
    let stderr = exec.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let waiting = tokio::time::timeout(SOON, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("waiting for the lock") {
                return true;
            }
        }
        false
    });
    assert!(waiting.await.expect("mongolock waits"), "mongolock waits");
    let drain = tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    // While it waits for b, it holds no lease on a: after its first round it let a go.
    // (It may keep its turn at a, a place at the head of a's line, for up to its TTL while
    // it waits for b, as `LockClient::multi` documents: a single attempt on a is refused
    // meanwhile, so that is not what this asks.)
    let a_free = eventually(SOON, || async {
        let on_a = locks
            .status(&Filter::default().resource("a"))
            .await
            .unwrap();
        on_a.is_empty()
    })
    .await;
    assert!(a_free, "the waiting set holds no lease on part of itself");

    held.release().await.unwrap();
    let output = wait_output(exec, SOON).await;
    drain.await.unwrap();
    assert_eq!(output.status.code(), Some(0));
    let tokens = text(&output.stdout);
    assert!(
        tokens.trim().starts_with("a=") && tokens.contains(",b="),
        "{tokens}"
    );
    assert!(locks.status(&Filter::default()).await.unwrap().is_empty());
    locks.shutdown().await;
}
