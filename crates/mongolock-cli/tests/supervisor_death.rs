//! The child of `mongolock exec` does not outlive it: on Linux, a mongolock killed with
//! SIGKILL (which it cannot catch, so cannot forward) takes its child with it, through the
//! child's parent-death signal. Without that, the child ran on without a lease, and a second
//! `exec --lock-id` with the same lock id resumed the lease while the orphan still ran.

#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use common::{Env, eventually, run, temp_dir, text};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Whether process `pid` is gone (or a zombie nobody reaped yet: an orphan's new parent
/// in a container may be slow to reap it).
fn gone(pid: i32) -> bool {
    if kill(Pid::from_raw(pid), None) == Err(nix::errno::Errno::ESRCH) {
        return true;
    }
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            (stat.rsplit(')').next().unwrap_or(""))
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_dies_with_a_mongolock_killed_by_sigkill() {
    let env = Env::start("pdeathsig").await;
    let dir = temp_dir("pdeathsig");
    let pid_file = dir.join("child.pid");
    let script = format!("echo $$ > {}; exec sleep 60", pid_file.display());
    let mut mongolock = env.spawn(&[
        "exec",
        "--resource",
        "job",
        "--lock-id",
        "host-1",
        "--ttl",
        "30s",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let started = eventually(Duration::from_secs(20), || async {
        std::fs::read_to_string(&pid_file).is_ok_and(|pid| pid.ends_with('\n'))
    })
    .await;
    assert!(started, "the child did not start");
    let child: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!gone(child), "the child runs");

    let pid = mongolock.id().expect("mongolock runs") as i32;
    kill(Pid::from_raw(pid), Signal::SIGKILL).expect("mongolock is killed");
    let _ = mongolock.wait().await;
    let died = eventually(Duration::from_secs(5), || async { gone(child) }).await;
    if !died {
        let _ = kill(Pid::from_raw(child), Signal::SIGKILL);
    }
    assert!(died, "the child outlived a mongolock killed with SIGKILL");

    // The same lock id takes the lease back at once, and nobody else runs under it.
    let output = run(env.cmd(&[
        "exec",
        "--resource",
        "job",
        "--lock-id",
        "host-1",
        "--ttl",
        "30s",
        "--no-wait",
        "--",
        "true",
    ]))
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let _ = std::fs::remove_dir_all(dir);
}
