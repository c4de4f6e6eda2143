//! `mongolock exec --lock-id` and `--lock-delay` as processes, against the emulator: a
//! `mongolock` killed while it holds a lock and started again with the same lock id takes
//! its lease back at once, with the same fencing token; a lock-delay is stored with the
//! lock.

mod common;

use std::time::Duration;

use common::{Env, eventually, run, temp_dir, text};
use mongolock::Filter;

/// Generous bound for a process that should be ready soon.
const SOON: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_exec_started_again_with_its_lock_id_resumes_its_lease() {
    let env = Env::start("exec_resume").await;
    let dir = temp_dir("exec_resume");
    let (token_file, pid_file) = (dir.join("token"), dir.join("pid"));
    let script = format!(
        "echo $$ > {pid}; echo $MONGOLOCK_FENCING_TOKEN > {token}; sleep 60",
        pid = pid_file.display(),
        token = token_file.display()
    );
    let args = [
        "exec",
        "--resource",
        "job",
        "--lock-id",
        "host-a",
        "--ttl",
        "30s",
    ];
    let mut first = env.spawn(&[&args[..], &["--", "sh", "-c", &script]].concat());
    assert!(eventually(SOON, || async { token_file.exists() }).await);
    let token = std::fs::read_to_string(&token_file).unwrap();
    // Killed with SIGKILL: no release; its child is killed too.
    first.kill().await.unwrap();
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let _ = std::process::Command::new("kill")
        .args(["-9", pid.trim()])
        .status();

    // Another lock id is refused at once: the dead process's lease lives for its TTL.
    let refused = run(env.cmd(&["exec", "--resource", "job", "--no-wait", "--", "true"])).await;
    assert_eq!(refused.status.code(), Some(75), "{}", text(&refused.stderr));
    // The same lock id, started again: its lease, at once, with its token.
    let again = run(env.cmd(
        &[
            &args[..],
            &[
                "--no-wait",
                "--",
                "sh",
                "-c",
                "echo $MONGOLOCK_FENCING_TOKEN",
            ],
        ]
        .concat(),
    ))
    .await;
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(text(&again.stdout).trim(), token.trim());
    // It released it when its child ended.
    let held = env.locks().status(&Filter::default()).await.unwrap();
    assert!(held.is_empty(), "{held:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_delay_is_stored_with_the_lock() {
    let env = Env::start("exec_delay").await;
    let dir = temp_dir("exec_delay");
    let ready = dir.join("ready");
    let script = format!("touch {}; sleep 60", ready.display());
    let mut exec = env.spawn(&[
        "exec",
        "--resource",
        "job",
        "--lock-delay",
        "5s",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert!(eventually(SOON, || async { ready.exists() }).await);
    let held = env.locks().status(&Filter::default()).await.unwrap();
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].holder().lock_delay(), Some(Duration::from_secs(5)));
    // Killed without a release, its lease runs out (the server's clock jumps past the TTL):
    // `status` shows the lock within its lock-delay, not as an expired lock that blocks
    // nobody.
    exec.kill().await.unwrap();
    env.server.clock().advance(Duration::from_secs(31));
    let status = run(env.cmd(&["status"])).await;
    let out = text(&status.stdout);
    assert!(out.contains("lock-delay"), "{out}");
    assert!(out.contains("keep everybody out"), "{out}");
    assert!(!out.contains("block nobody"), "{out}");
    let refused = run(env.cmd(&["exec", "--resource", "job", "--no-wait", "--", "true"])).await;
    assert_eq!(refused.status.code(), Some(75), "{}", text(&refused.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}
