//! `mongolock demo`, run as a process: on the embedded emulator (its first scene, then the
//! failover scene on an emulated three-member set), with `--json`, and against a deployment
//! given with `--uri` (no failover there).

use std::time::Duration;

use assert_cmd::Command;

/// The command, with no server from the environment: the demo starts its own emulator.
fn demo() -> Command {
    let mut command = Command::cargo_bin("mongolock").expect("the mongolock binary is built");
    command
        .env_remove("MONGODB_URI")
        .env_remove("RUST_LOG")
        .timeout(Duration::from_secs(60))
        .arg("demo");
    command
}

#[test]
fn the_demo_runs_on_the_embedded_emulator_and_every_promise_holds() {
    let output = demo()
        .args(["--workers", "4", "--seconds", "4"])
        .output()
        .expect("the demo runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "status {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    for expected in [
        "embedded MongoDB emulator",
        "acquired nightly-report",
        "acquired a gpu permit",
        "config to read",
        "is CUT OFF from the server, holding nightly-report",
        "is told it LOST nightly-report",
        "CRASHES holding config",
        "-> TAKEOVER from w3",
        "-> TAKEOVER from w4",
        "writes the report with its OLD token: refused",
        "handoffs:",
        "max concurrent on nightly-report: 1",
        "max concurrent on config",
        "fencing:",
        "loss before takeover",
        // The failover scene: the primary stepped down while w1 held, a secondary was
        // elected, and w1's lease lived on through the new primary.
        "Scene 2, a failover",
        "PRIMARY STEPS DOWN: member 0 (term 1), while w1 nightly-report",
        "is ELECTED primary (term 2)",
        "w1 kept nightly-report through it: its write after the failover, with its old grant's token, was accepted",
    ] {
        assert!(stdout.contains(expected), "no {expected:?} in:\n{stdout}");
    }
    assert!(!stdout.contains("BROKEN"), "{stdout}");
    assert!(!stdout.contains("!!"), "{stdout}");
    assert_eq!(
        stdout.lines().last(),
        Some("all promises held"),
        "the last line:\n{stdout}"
    );
}

#[test]
fn the_demo_reports_as_one_json_object() {
    let output = demo()
        .args(["--workers", "3", "--seconds", "3", "--json"])
        .output()
        .expect("the demo runs");
    assert!(
        output.status.success(),
        "status {:?}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("standard output is one JSON object");
    assert_eq!(report["ok"], true, "{report:#}");
    assert_eq!(report["server"], "emulator");
    assert_eq!(report["workers"], 3);
    assert!(report["handoffs"].as_u64().is_some());
    assert_eq!(report["takeovers"], 2, "{report:#}");
    let locks = report["locks"].as_array().expect("locks");
    assert_eq!(locks.len(), 3);
    for lock in locks {
        assert_eq!(lock["ok"], true, "{lock:#}");
    }
    assert_eq!(locks[0]["name"], "nightly-report");
    assert!(locks[0]["max_concurrent"].as_u64() <= Some(1));
    assert!(locks[1]["max_concurrent"].as_u64() <= Some(2));
    assert_eq!(locks[2]["writer_shared"], false);
    assert_eq!(report["fencing"]["tokens_increasing"], true);
    assert_eq!(report["fencing"]["refused_from_live_holders"], 0);
    assert_eq!(report["fencing"]["stale_writes_refused"], 1);
    assert_eq!(report["losses_before_takeover"], true);
    let losses = report["losses"].as_array().expect("losses");
    let mut hows: Vec<&str> = losses.iter().filter_map(|l| l["how"].as_str()).collect();
    hows.sort();
    assert_eq!(hows, ["crashed", "cut off"], "{report:#}");
    for loss in losses {
        assert_eq!(loss["before_takeover"], true, "{loss:#}");
        assert!(loss["ended_at_s"].as_f64() < loss["taken_over_at_s"].as_f64());
    }
    assert_eq!(report["violations"], serde_json::json!([]));
    // The failover scene happened, and kept every promise.
    let failover = &report["failover"];
    assert_eq!(failover["stepped_down"], 0, "{failover:#}");
    assert!(
        failover["new_primary"].as_u64().is_some_and(|p| p != 0),
        "{failover:#}"
    );
    assert_eq!(failover["terms"], serde_json::json!([1, 2]), "{failover:#}");
    assert!(
        failover["held_at_step_down"]
            .as_array()
            .is_some_and(|held| held.contains(&"w1 nightly-report".into())),
        "{failover:#}"
    );
    assert_eq!(
        failover["write_after_failover_accepted"], true,
        "{failover:#}"
    );
    assert_eq!(failover["report"]["ok"], true, "{failover:#}");
    assert_eq!(failover["report"]["violations"], serde_json::json!([]));
    // The live lines went to standard error.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("TAKEOVER"), "{stderr}");
}

#[test]
fn the_demo_runs_against_a_deployment_given_with_uri() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let server = runtime
        .block_on(mongolock_testkit::TestServer::start())
        .expect("the emulator starts");
    let output = demo()
        .args(["--uri", &server.uri(), "--workers", "3", "--seconds", "2"])
        .output()
        .expect("the demo runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "status {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("the deployment given with --uri"),
        "{stdout}"
    );
    assert!(stdout.contains("skipped: the network cut"), "{stdout}");
    assert!(stdout.contains("skipped: the failover"), "{stdout}");
    assert!(!stdout.contains("Scene 2"), "{stdout}");
    assert!(stdout.contains("CRASHES holding config"), "{stdout}");
    assert!(stdout.contains("-> TAKEOVER from w3"), "{stdout}");
    assert_eq!(stdout.lines().last(), Some("all promises held"), "{stdout}");
    runtime.block_on(server.shutdown());
}

#[test]
fn the_demo_needs_three_workers() {
    let output = demo()
        .args(["--workers", "2"])
        .output()
        .expect("the demo runs");
    assert_eq!(output.status.code(), Some(2), "bad usage");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--workers"), "{stderr}");
}
