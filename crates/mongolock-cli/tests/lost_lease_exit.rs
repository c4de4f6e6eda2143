//! A lease lost to a server outage ends `mongolock exec` promptly: the child is stopped,
//! the cleanup that needs the server is given at most a couple of seconds (said on stderr),
//! and mongolock exits with 79. Once the lease is lost there is nothing left to protect, and
//! what the server still holds of it ends with its TTL.

mod common;

use std::time::{Duration, Instant};

use common::{MONGOLOCK, eventually, temp_dir, text};
use mongolock_testkit::{FaultProxy, TestServer};
use nix::sys::signal::kill;
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};

/// How long mongolock may take to exit once it has said the lease was lost: its cleanup
/// limit (2 s) and some slack for a loaded machine. Before the fix it retried the release
/// for 20 to 30 s.
const PROMPTLY: Duration = Duration::from_secs(5);

/// Whether process `pid` is gone (or a zombie nobody reaped yet).
fn gone(pid: i32) -> bool {
    if kill(Pid::from_raw(pid), None) == Err(nix::errno::Errno::ESRCH) {
        return true;
    }
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            stat.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

/// Runs `exec --ttl 3s` of a long child against `uri`, calls `outage` once the child runs,
/// and checks that mongolock says the lease is lost, stops the child, and exits with 79
/// within [`PROMPTLY`] of saying so, telling on stderr what it waited for.
async fn exits_promptly_after(name: &str, uri: &str, outage: impl AsyncFnOnce()) {
    let dir = temp_dir(name);
    let pid_file = dir.join("child.pid");
    let script = format!("echo $$ > {}; exec sleep 60", pid_file.display());
    let mut mongolock = tokio::process::Command::new(MONGOLOCK)
        .env_remove("MONGODB_URI")
        .args(["--uri", uri, "--db", name])
        .args(["exec", "--resource", "job", "--ttl", "3s", "--"])
        .args(["sh", "-c", &script])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("mongolock starts");
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

    outage().await;
    let mut stderr = BufReader::new(mongolock.stderr.take().expect("stderr is piped"));
    let mut said = String::new();
    let lost_at = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let mut line = String::new();
            if stderr.read_line(&mut line).await.expect("stderr is read") == 0 {
                return None;
            }
            said.push_str(&line);
            if line.contains("lost") {
                return Some(Instant::now());
            }
        }
    })
    .await
    .expect("the loss is seen within the TTL")
    .unwrap_or_else(|| panic!("mongolock ended without a loss: {said}"));

    let status = tokio::time::timeout(Duration::from_secs(60), mongolock.wait())
        .await
        .expect("mongolock exits at last")
        .expect("mongolock is waited for");
    let took = lost_at.elapsed();
    let mut rest = Vec::new();
    let _ = stderr.read_to_end(&mut rest).await;
    said.push_str(&text(&rest));
    assert_eq!(status.code(), Some(79), "{said}");
    assert!(
        took < PROMPTLY,
        "mongolock exited {took:?} after the loss (at most {PROMPTLY:?}): {said}"
    );
    assert!(gone(child), "the child was stopped: {said}");
    // A wait longer than a moment is said.
    assert!(
        took < Duration::from_secs(1) || said.contains("giving the server up to 2s"),
        "what it waited {took:?} for is said: {said}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stopped_does_not_hold_mongolock_after_the_loss() {
    let server = TestServer::start().await.expect("the emulator starts");
    let uri = server.uri();
    exits_promptly_after("stopped", &uri, async move || server.shutdown().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_went_silent_does_not_hold_mongolock_after_the_loss() {
    let server = TestServer::start().await.expect("the emulator starts");
    let proxy = FaultProxy::start(server.addr())
        .await
        .expect("the proxy starts");
    let uri = proxy.uri();
    exits_promptly_after("silent", &uri, async || proxy.blackhole()).await;
}
