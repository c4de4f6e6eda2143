//! `mongolock elect` and `mongolock leader` as processes, against the emulator: the child
//! runs while leading with its term, one leader at a time, a lost leadership stops the
//! child, and `leader` shows (and with `--watch` follows) who leads.

mod common;

use std::time::Duration;

use common::{Env, eventually, run, temp_dir, text, wait_output};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, BufReader};

/// Generous bound for a process that should end soon; a wrong mechanism (a child left
/// running, a leadership never given up) exceeds it.
const SOON: Duration = Duration::from_secs(15);

/// The leader `leader --json --name NAME` prints.
async fn leader_json(env: &Env, name: &str) -> serde_json::Value {
    let output = run(env.cmd(&["--json", "leader", "--name", name])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert_eq!(stdout.lines().count(), 1, "one line: {stdout}");
    serde_json::from_str(&stdout).expect("one JSON document")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_runs_the_child_while_leading_and_a_second_candidate_is_refused() {
    let env = Env::start("elect_leads").await;
    let locks = env.locks();
    let election = locks.election("sched");
    let dir = temp_dir("elect_leads");
    let (ready, go, seen, second) = (
        dir.join("ready"),
        dir.join("go"),
        dir.join("env"),
        dir.join("second"),
    );
    let script = format!(
        "echo \"$MONGOLOCK_ELECTION $MONGOLOCK_TERM $MONGOLOCK_LOCK_ID\" > {seen}; \
         touch {ready}; while [ ! -e {go} ]; do sleep 0.05; done; exit 7",
        seen = seen.display(),
        ready = ready.display(),
        go = go.display()
    );
    let elect = env.spawn(&[
        "--json", "elect", "--name", "sched", "--value", "host-a", "--", "sh", "-c", &script,
    ]);
    assert!(
        eventually(SOON, || async { ready.exists() }).await,
        "the child started"
    );

    // The child runs while leading, with the leadership's term and lock id.
    let leader = election.leader().await.unwrap().expect("someone leads");
    assert_eq!(leader.value(), "host-a");
    let line = std::fs::read_to_string(&seen).expect("the child wrote its environment");
    let fields: Vec<&str> = line.split_whitespace().collect();
    let term = leader.term().to_string();
    assert_eq!(
        fields,
        ["sched", term.as_str(), leader.lock_id()],
        "the child's environment: {line}"
    );

    // One leader at a time: a second candidate that does not wait is refused, its child
    // never runs, and the leader is unchanged.
    let touch = format!("touch {}", second.display());
    let output = run(env.cmd(&[
        "elect",
        "--name",
        "sched",
        "--value",
        "host-b",
        "--no-wait",
        "--",
        "sh",
        "-c",
        &touch,
    ]))
    .await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(75), "{stderr}");
    assert!(stderr.contains("sched is led by others"), "{stderr}");
    assert!(!second.exists(), "the second candidate's child did not run");
    let shown = leader_json(&env, "sched").await;
    assert_eq!(shown["value"], "host-a");
    assert_eq!(shown["term"], leader.term());

    // The child's status is passed through, and leadership is given up at once.
    std::fs::write(&go, "").unwrap();
    let output = wait_output(elect, SOON).await;
    assert_eq!(output.status.code(), Some(7), "{}", text(&output.stderr));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["election"], "sched");
    assert_eq!(report["elected"], true);
    assert_eq!(report["term"], leader.term());
    assert_eq!(report["lock_id"], leader.lock_id());
    assert_eq!(report["child_exit_code"], 7);
    assert_eq!(report["resigned"], true);
    assert_eq!(report["lost"], false);
    assert!(
        election.leader().await.unwrap().is_none(),
        "resigned, not left to the TTL"
    );

    // Free now: the second candidate leads, in a later term.
    let script = "echo $MONGOLOCK_TERM";
    let output = run(env.cmd(&[
        "elect",
        "--name",
        "sched",
        "--value",
        "host-b",
        "--no-wait",
        "--",
        "sh",
        "-c",
        script,
    ]))
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let next: i64 = text(&output.stdout).trim().parse().expect("a term");
    assert!(next > leader.term(), "{next} after {}", leader.term());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_released_leadership_stops_the_child() {
    let env = Env::start("elect_lost").await;
    let dir = temp_dir("elect_lost");
    let pid_file = dir.join("pid");
    let script = format!("echo $$ > {}; exec sleep 30", pid_file.display());
    let elect = env.spawn(&[
        "--json", "elect", "--name", "sched", "--value", "host-a", "--ttl", "2s", "--", "sh", "-c",
        &script,
    ]);
    assert!(
        eventually(SOON, || async { pid_file.exists() }).await,
        "the child started"
    );
    let output = run(env.cmd(&["release", "--resource", "sched", "--force", "--yes"])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("released 1 lock(s) on sched"));

    let output = wait_output(elect, SOON).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(79), "{stderr}");
    assert!(
        stderr.contains("leadership of sched lost (revoked"),
        "the reason is given: {stderr}"
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["lost"], true);
    assert_eq!(report["loss_reason"], "revoked");
    assert_eq!(report["resigned"], false);
    assert_eq!(report["child_signal"], 15, "SIGTERM stopped it");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        kill(Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH),
        "the child is gone"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_shows_the_value_term_lock_id_and_host_or_that_nobody_leads() {
    let env = Env::start("leader").await;
    let locks = env.locks();

    let shown = leader_json(&env, "sched").await;
    assert_eq!(shown["election"], "sched");
    assert_eq!(shown["has_leader"], false);
    assert_eq!(shown["value"], serde_json::Value::Null);
    let output = run(env.cmd(&["leader", "--name", "sched"])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout).trim(), "sched: nobody leads");

    let leading = locks
        .election("sched")
        .host("host-1")
        .campaign("10.0.0.7:8080")
        .await
        .unwrap();
    let shown = leader_json(&env, "sched").await;
    assert_eq!(shown["has_leader"], true);
    assert_eq!(shown["value"], "10.0.0.7:8080");
    assert_eq!(shown["term"], leading.term());
    assert_eq!(shown["lock_id"], leading.guard().lock_id());
    assert_eq!(shown["host"], "host-1");
    let output = run(env.cmd(&["leader", "--name", "sched"])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout).trim(),
        format!(
            "sched: led by 10.0.0.7:8080 (term {}, lock id {}, host host-1)",
            leading.term(),
            leading.guard().lock_id()
        )
    );
    leading.resign().await.unwrap();
    assert_eq!(leader_json(&env, "sched").await["has_leader"], false);
    locks.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_watch_prints_every_change_until_interrupted() {
    let env = Env::start("leader_watch").await;
    let locks = env.locks();
    let election = locks.election("sched");
    let mut watch = env.spawn(&["--json", "leader", "--name", "sched", "--watch"]);
    let pid = Pid::from_raw(watch.id().unwrap() as i32);
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut next = async || -> serde_json::Value {
        let line = tokio::time::timeout(SOON, lines.next_line())
            .await
            .expect("a line in time")
            .unwrap()
            .expect("the watch goes on");
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("one JSON document: {line}"))
    };

    assert_eq!(next().await["has_leader"], false, "nobody leads at first");
    let leading = election.campaign("host-a").await.unwrap();
    let seen = next().await;
    assert_eq!(seen["value"], "host-a");
    assert_eq!(seen["term"], leading.term());
    leading.proclaim("host-a, draining").await.unwrap();
    let seen = next().await;
    assert_eq!(seen["value"], "host-a, draining");
    assert_eq!(seen["term"], leading.term());
    let term = leading.term();
    leading.resign().await.unwrap();
    assert_eq!(next().await["has_leader"], false, "nobody leads after");
    let leading = election.campaign("host-b").await.unwrap();
    let seen = next().await;
    assert_eq!(seen["value"], "host-b");
    assert!(seen["term"].as_i64().unwrap() > term, "{seen}");

    kill(pid, Signal::SIGINT).unwrap();
    let status = tokio::time::timeout(SOON, watch.wait())
        .await
        .expect("the watch ends when interrupted")
        .unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "Ctrl-C ends the watch with status 0"
    );
    leading.resign().await.unwrap();
    locks.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_candidate_leads_once_the_leader_resigns() {
    let env = Env::start("elect_wait").await;
    let dir = temp_dir("elect_wait");
    let (ready, go) = (dir.join("ready"), dir.join("go"));
    let first_script = format!(
        "touch {ready}; while [ ! -e {go} ]; do sleep 0.05; done; echo $MONGOLOCK_TERM",
        ready = ready.display(),
        go = go.display()
    );
    let first = env.spawn(&[
        "elect",
        "--name",
        "sched",
        "--value",
        "host-a",
        "--",
        "sh",
        "-c",
        &first_script,
    ]);
    assert!(
        eventually(SOON, || async { ready.exists() }).await,
        "the first candidate leads"
    );
    // -v logs "campaigning" once it is about to wait.
    let mut second = env.spawn(&[
        "-v",
        "elect",
        "--name",
        "sched",
        "--value",
        "host-b",
        "--wait",
        "1m",
        "--",
        "sh",
        "-c",
        "echo $MONGOLOCK_TERM",
    ]);
    let mut lines = BufReader::new(second.stderr.take().unwrap()).lines();
    let campaigning = tokio::time::timeout(SOON, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("campaigning") {
                return true;
            }
        }
        false
    });
    assert!(campaigning.await.expect("the second candidate campaigns"));
    let drain = tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    // It waits: the first still leads (until its child ends).
    let leader = env.locks().election("sched").leader().await.unwrap();
    assert_eq!(leader.expect("someone leads").value(), "host-a");

    std::fs::write(&go, "").unwrap();
    let first = wait_output(first, SOON).await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let second = wait_output(second, SOON).await;
    drain.await.unwrap();
    assert_eq!(second.status.code(), Some(0));
    let term = |output: &std::process::Output| -> i64 {
        text(&output.stdout).trim().parse().expect("a term")
    };
    assert!(term(&second) > term(&first), "a later term");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_elect_started_again_with_its_lock_id_advertises_its_new_value() {
    let env = Env::start("elect_resume").await;
    let dir = temp_dir("elect_resume");
    let (pid_file, ready, go) = (dir.join("pid"), dir.join("ready"), dir.join("go"));
    let elect = |value: &'static str, script: &str| {
        env.spawn(&[
            "elect",
            "--name",
            "sched",
            "--lock-id",
            "node-1",
            "--ttl",
            "30s",
            "--value",
            value,
            "--",
            "sh",
            "-c",
            script,
        ])
    };
    let script = format!("echo $$ > {}; exec sleep 60", pid_file.display());
    let mut first = elect("old-addr:80", &script);
    assert!(
        eventually(SOON, || async { pid_file.exists() }).await,
        "the first leads"
    );
    let term = leader_json(&env, "sched").await["term"].clone();
    // Killed with SIGKILL: no resignation; its child is killed too.
    first.kill().await.unwrap();
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);

    // Started again within the TTL, at a new address: it leads at once, in the same term,
    // advertising the new address. (Its child's wait is bounded: it ends by itself if the
    // test fails before writing `go`.)
    let script = format!(
        "touch {ready}; i=0; while [ ! -e {go} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
        ready = ready.display(),
        go = go.display()
    );
    let second = elect("new-addr:80", &script);
    assert!(
        eventually(SOON, || async { ready.exists() }).await,
        "the second leads"
    );
    let shown = leader_json(&env, "sched").await;
    assert_eq!(shown["value"], "new-addr:80", "{shown}");
    assert_eq!(shown["term"], term, "resumed: {shown}");
    let output = run(env.cmd(&["leader", "--name", "sched"])).await;
    let stdout = text(&output.stdout);
    assert!(stdout.starts_with("sched: led by new-addr:80 "), "{stdout}");
    std::fs::write(&go, "").unwrap();
    let output = wait_output(second, SOON).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let _ = std::fs::remove_dir_all(dir);
}
