//! `mongolock exec` as a process, against the emulator: exclusion, the child's environment
//! and exit status, a lost lease, forwarded signals, and bad input.

mod common;

use std::time::Duration;

use common::{Env, eventually, run, temp_dir, text, wait_output};
use mongolock::{Filter, LockDetails};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, BufReader};

/// Generous bound for a process that should end soon; a wrong mechanism (a child left
/// running, a lock never released) exceeds it.
const SOON: Duration = Duration::from_secs(15);

/// Whether process `pid` is gone (reaped).
fn gone(pid: i32) -> bool {
    kill(Pid::from_raw(pid), None) == Err(nix::errno::Errno::ESRCH)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_on_one_resource_never_overlap() {
    let env = Env::start("overlap").await;
    let dir = temp_dir("overlap");
    let log = dir.join("log");
    let script = format!(
        "echo \"start $0 $(date +%s%N)\" >> {log}; sleep 0.3; echo \"end $0 $(date +%s%N)\" >> {log}",
        log = log.display()
    );
    let runs: Vec<_> = (0..3)
        .map(|i| {
            env.spawn(&[
                "exec",
                "--resource",
                "job",
                "--",
                "sh",
                "-c",
                &script,
                &format!("run{i}"),
            ])
        })
        .collect();
    for child in runs {
        let output = wait_output(child, Duration::from_secs(60)).await;
        assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    }

    let log = std::fs::read_to_string(&log).expect("the children wrote the log");
    let mut intervals = std::collections::BTreeMap::<String, (u128, u128)>::new();
    for line in log.lines() {
        let [what, run, nanos]: [&str; 3] = line
            .split(' ')
            .collect::<Vec<_>>()
            .try_into()
            .unwrap_or_else(|_| panic!("a bad log line: {line:?}"));
        let nanos: u128 = nanos.parse().expect("nanoseconds");
        let entry = intervals.entry(run.to_owned()).or_default();
        match what {
            "start" => entry.0 = nanos,
            "end" => entry.1 = nanos,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(intervals.len(), 3, "every run ran: {log}");
    let mut spans: Vec<_> = intervals.values().copied().collect();
    spans.sort();
    for pair in spans.windows(2) {
        let ((_, end), (start, _)) = (pair[0], pair[1]);
        assert!(end <= start, "two children overlapped: {log}");
    }
    assert!(
        env.locks()
            .status(&Filter::default())
            .await
            .unwrap()
            .is_empty(),
        "every run released its lock"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_wait_fails_fast_when_the_lock_is_held() {
    let env = Env::start("nowait").await;
    let locks = env.locks();
    let held = locks
        .mutex("job")
        .owner("the test")
        .acquire()
        .await
        .unwrap();
    let dir = temp_dir("nowait");
    let marker = dir.join("ran");
    let touch = format!("touch {}", marker.display());

    let output = run(env.cmd(&[
        "exec",
        "--resource",
        "job",
        "--no-wait",
        "--",
        "sh",
        "-c",
        &touch,
    ]))
    .await;
    assert_eq!(output.status.code(), Some(75), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("job is held"),
        "{}",
        text(&output.stderr)
    );
    assert!(!marker.exists(), "the child did not run");

    // --wait gives up too, after waiting.
    let output = run(env.cmd(&[
        "--json",
        "exec",
        "--resource",
        "job",
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
    assert_eq!(report["exit_status"], 75);
    assert!(!marker.exists(), "the child did not run");

    held.release().await.unwrap();
    let output = run(env.cmd(&[
        "exec",
        "--resource",
        "job",
        "--no-wait",
        "--",
        "sh",
        "-c",
        &touch,
    ]))
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(marker.exists(), "free now: the child ran");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_locks_and_semaphores_admit_each_other_but_not_a_writer() {
    let env = Env::start("shared").await;
    let locks = env.locks();
    let reading = locks.rwlock("config").read().await.unwrap();
    let output = run(env.cmd(&[
        "exec",
        "--resource",
        "config",
        "--shared",
        "--no-wait",
        "--",
        "true",
    ]))
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let output = run(env.cmd(&["exec", "--resource", "config", "--no-wait", "--", "true"])).await;
    assert_eq!(output.status.code(), Some(75), "a reader holds it");
    reading.release().await.unwrap();

    let gpus = locks.semaphore("gpu", 2);
    let first = gpus.acquire().await.unwrap();
    let args = [
        "exec",
        "--resource",
        "gpu",
        "--shared",
        "--max",
        "2",
        "--no-wait",
        "--",
        "true",
    ];
    let output = run(env.cmd(&args)).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let second = gpus.acquire().await.unwrap();
    let output = run(env.cmd(&args)).await;
    assert_eq!(output.status.code(), Some(75), "both permits are taken");
    drop((first, second));
    locks.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_child_gets_the_resource_the_lock_id_and_a_growing_fencing_token() {
    let env = Env::start("env").await;
    let script = "echo $MONGOLOCK_RESOURCE $MONGOLOCK_LOCK_ID $MONGOLOCK_FENCING_TOKEN";
    let mut seen = Vec::new();
    for _ in 0..2 {
        let output = run(env.cmd(&[
            "--json",
            "exec",
            "--resource",
            "report",
            "--",
            "sh",
            "-c",
            script,
        ]))
        .await;
        assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
        let stdout = text(&output.stdout);
        let mut lines = stdout.lines();
        let child_line = lines.next().expect("the child's line");
        let report: serde_json::Value =
            serde_json::from_str(lines.next().expect("the JSON report")).unwrap();
        let [resource, lock_id, token]: [&str; 3] = child_line
            .split(' ')
            .collect::<Vec<_>>()
            .try_into()
            .unwrap_or_else(|_| panic!("three values: {child_line:?}"));
        assert_eq!(resource, "report");
        assert_eq!(lock_id.len(), 32, "a random lock id: {lock_id}");
        let token: i64 = token.parse().expect("a number");
        assert_eq!(report["resource"], "report");
        assert_eq!(report["lock_id"], lock_id);
        assert_eq!(report["fencing_token"], token);
        assert_eq!(report["exit_status"], 0);
        assert_eq!(report["lost"], false);
        assert_eq!(report["released"], true);
        seen.push((lock_id.to_owned(), token));
    }
    assert_ne!(seen[0].0, seen[1].0, "a lock id per run");
    assert!(seen[1].1 > seen[0].1, "the token grows: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_childs_exit_status_is_passed_through() {
    let env = Env::start("status").await;
    let output = run(env.cmd(&["exec", "--resource", "r", "--", "sh", "-c", "exit 7"])).await;
    assert_eq!(output.status.code(), Some(7));
    let output =
        run(env.cmd(&["exec", "--resource", "r", "--", "sh", "-c", "kill -USR1 $$"])).await;
    assert_eq!(output.status.code(), Some(128 + 10), "128 + SIGUSR1");
    let output = run(env.cmd(&["exec", "--resource", "r", "--", "no-such-command-here"])).await;
    assert_eq!(output.status.code(), Some(127));
    assert!(text(&output.stderr).contains("no-such-command-here"));
    assert!(
        env.locks()
            .status(&Filter::default())
            .await
            .unwrap()
            .is_empty(),
        "released every time"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_stops_the_child() {
    let env = Env::start("lost").await;
    let dir = temp_dir("lost");
    let pid_file = dir.join("pid");
    let script = format!("echo $$ > {}; exec sleep 30", pid_file.display());
    let exec = env.spawn(&[
        "--json",
        "exec",
        "--resource",
        "batch",
        "--ttl",
        "2s",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let locks = env.locks();
    assert!(
        eventually(SOON, || async { pid_file.exists() }).await,
        "the child started"
    );
    let output = run(env.cmd(&["release", "--resource", "batch", "--force", "--yes"])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("released 1 lock(s) on batch"));

    let output = wait_output(exec, SOON).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(79), "{stderr}");
    assert!(
        stderr.contains("lease on batch lost (revoked"),
        "the reason is given: {stderr}"
    );
    assert!(stderr.contains("stopping the child"), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["lost"], true);
    assert_eq!(report["loss_reason"], "revoked");
    assert_eq!(report["child_signal"], 15, "SIGTERM stopped it");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(gone(pid), "the child is gone");
    assert!(locks.status(&Filter::default()).await.unwrap().is_empty());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_ignores_sigterm_gets_sigkill_after_kill_after() {
    let env = Env::start("killafter").await;
    let dir = temp_dir("killafter");
    let pid_file = dir.join("pid");
    // The shell and its `sleep`s ignore SIGTERM; only SIGKILL to the group ends them.
    let script = format!(
        "trap '' TERM; echo $$ > {}; while true; do sleep 0.1; done",
        pid_file.display()
    );
    let exec = env.spawn(&[
        "exec",
        "--resource",
        "stubborn",
        "--ttl",
        "2s",
        "--kill-after",
        "1s",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert!(
        eventually(SOON, || async { pid_file.exists() }).await,
        "the child started"
    );
    assert_eq!(env.locks().force_release("stubborn").await.unwrap(), 1);
    let output = wait_output(exec, SOON).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(79), "{stderr}");
    assert!(stderr.contains("SIGKILL"), "{stderr}");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(gone(pid), "the child is gone");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_are_forwarded_to_the_child_and_the_lock_is_released() {
    let env = Env::start("signals").await;
    let dir = temp_dir("signals");
    let (ready, got) = (dir.join("ready"), dir.join("got"));
    let script = format!(
        "trap 'echo got TERM >> {got}; exit 3' TERM; echo ready > {ready}; \
         while true; do sleep 0.1; done",
        got = got.display(),
        ready = ready.display()
    );
    let exec = env.spawn(&["exec", "--resource", "svc", "--", "sh", "-c", &script]);
    let pid = Pid::from_raw(exec.id().unwrap() as i32);
    assert!(
        eventually(SOON, || async { ready.exists() }).await,
        "the child started"
    );
    kill(pid, Signal::SIGTERM).unwrap();

    let output = wait_output(exec, SOON).await;
    assert_eq!(output.status.code(), Some(3), "{}", text(&output.stderr));
    let got = std::fs::read_to_string(&got).expect("the child wrote what it got");
    assert_eq!(got.trim(), "got TERM");
    let held = env
        .locks()
        .status(&Filter::default().resource("svc"))
        .await
        .unwrap();
    assert!(held.is_empty(), "released: {held:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_while_waiting_gives_up_and_leaves_no_lock() {
    let env = Env::start("waitsig").await;
    let locks = env.locks();
    let details = LockDetails::default().owner("blocker");
    let blocker = locks.xlock("busy", "blocker", details).await.unwrap();
    // -v logs "waiting for the lock" once the signal handlers are installed.
    let mut exec = env.spawn(&["-v", "exec", "--resource", "busy", "--", "true"]);
    let pid = Pid::from_raw(exec.id().unwrap() as i32);
    let mut stderr = BufReader::new(exec.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    let waiting = tokio::time::timeout(SOON, async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            seen.push_str(&line);
            seen.push('\n');
            if line.contains("waiting for the lock") {
                return;
            }
        }
        panic!("mongolock ended before waiting: {seen}");
    });
    waiting.await.expect("mongolock waits");
    kill(pid, Signal::SIGINT).unwrap();
    let rest = tokio::time::timeout(SOON, async {
        let mut rest = String::new();
        while let Some(line) = stderr.next_line().await.unwrap() {
            rest.push_str(&line);
            rest.push('\n');
        }
        rest
    })
    .await
    .expect("stderr ends");
    let status = tokio::time::timeout(SOON, exec.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(130), "{rest}");
    assert!(
        rest.contains("SIGINT received while waiting for busy: gave up"),
        "{rest}"
    );
    let held = locks.status(&Filter::default()).await.unwrap();
    assert_eq!(held.len(), 1, "only the blocker: {held:?}");
    assert_eq!(held[0].lock_id(), "blocker");
    let _ = locks.release(&blocker).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_server_it_says_how_to_give_one() {
    let mut cmd = assert_cmd::Command::cargo_bin("mongolock").unwrap();
    cmd.env_remove("MONGODB_URI")
        .args(["exec", "--resource", "r", "--", "true"]);
    let output = run(cmd).await;
    assert_eq!(output.status.code(), Some(78));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("--uri") && stderr.contains("MONGODB_URI"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_a_message_never_a_panic() {
    let env = Env::start("badinput").await;
    let cases: &[(&[&str], &str)] = &[
        (
            &["exec", "--resource", "r", "--max", "2", "--", "true"],
            "--shared",
        ),
        (&["exec", "--resource", "", "--", "true"], "--resource"),
        (
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
            "--max",
        ),
        (&["exec", "--resource", "r"], "COMMAND"),
        (
            &["exec", "--resource", "r", "--ttl", "soon", "--", "true"],
            "--ttl",
        ),
        (
            &[
                "exec",
                "--resource",
                "r",
                "--no-wait",
                "--wait",
                "1s",
                "--",
                "true",
            ],
            "--wait",
        ),
        (
            &["exec", "--resource", "r", "--ttl", "0s", "--", "true"],
            "ttl",
        ),
    ];
    for (args, mentions) in cases {
        let output = run(env.cmd(args)).await;
        let stderr = text(&output.stderr);
        assert!(
            matches!(output.status.code(), Some(1 | 2)),
            "{args:?}: {:?} {stderr}",
            output.status
        );
        assert!(stderr.contains(mentions), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_an_error_not_an_endless_wait() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port(); // closed again: nothing listens there
    let uri = format!("mongodb://127.0.0.1:{port}/?serverSelectionTimeoutMS=300");
    let mut cmd = assert_cmd::Command::cargo_bin("mongolock").unwrap();
    cmd.env_remove("MONGODB_URI")
        .args(["--uri", &uri, "exec", "--resource", "r", "--", "true"])
        .timeout(SOON);
    let output = run(cmd).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot reach the server"), "{stderr}");
}

/// `exec --min-hold`: a job that ends at once keeps the lock for the rest of the hold, so a
/// second run in the same period is refused; once the hold is over, it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minimum_hold_keeps_a_finished_job_from_running_again_until_it_ends() {
    let env = Env::start("min_hold").await;
    let first = run(env.cmd(&[
        "exec",
        "--resource",
        "hourly",
        "--min-hold",
        "3s",
        "--",
        "true",
    ]))
    .await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let again = run(env.cmd(&["exec", "--resource", "hourly", "--no-wait", "--", "true"])).await;
    assert_eq!(
        again.status.code(),
        Some(75),
        "held for the rest of the hold: {}",
        text(&again.stderr)
    );
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let later = run(env.cmd(&["exec", "--resource", "hourly", "--no-wait", "--", "true"])).await;
    assert_eq!(later.status.code(), Some(0), "{}", text(&later.stderr));
}
