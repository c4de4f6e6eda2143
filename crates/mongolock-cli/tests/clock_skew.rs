//! Client wall clocks that are minutes off decide nothing: expiry is judged by the server's
//! `$$NOW` and leases by each process's monotonic clock.
//!
//! Three `mongolock exec` loops contend for one resource; two of them run under libfaketime
//! (`faketime`, from Debian's package of that name), one with its wall clock five minutes
//! ahead and one five minutes behind (the monotonic clock left alone, as NTP would). Every
//! child checks, with an atomic `mkdir`, that nobody else is inside, and appends its fencing
//! token and its own view of the wall clock to a shared log. A library that judged expiry by
//! the client's wall clock would let the client that is ahead take live locks.
//!
//! `.ci/run` installs `faketime` (and the test fails in CI without it); elsewhere, without
//! it, the test prints a line starting with `SKIPPED:`, which `cargo test` shows, and
//! passes.

mod common;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Env, MONGOLOCK, temp_dir, text};

/// Rounds per contending client.
const ROUNDS: usize = 5;

/// The child: enter (an atomic `mkdir` that fails if someone is inside), log, stay a while,
/// leave.
const CHILD: &str = r#"
if ! mkdir "$DIR/inside" 2>/dev/null; then echo "$SKEW" >> "$DIR/overlaps"; fi
echo "$MONGOLOCK_FENCING_TOKEN $SKEW $(date +%s)" >> "$DIR/log"
sleep 0.2
rmdir "$DIR/inside" 2>/dev/null
true
"#;

fn faketime_installed() -> bool {
    std::process::Command::new("faketime")
        .args(["-f", "+0s", "true"])
        .status()
        .is_ok_and(|s| s.success())
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs() as i64
}

/// One contender: `ROUNDS` times `mongolock exec` of [`CHILD`], its wall clock shifted by
/// `skew` seconds (none: the real clock). Returns the exit statuses.
async fn contend(env: &Env, dir: &Path, skew: Option<i64>) -> Vec<Option<i32>> {
    let label = skew.map_or_else(|| "0".to_string(), |s| s.to_string());
    let mut statuses = Vec::new();
    for _ in 0..ROUNDS {
        let mut cmd = match skew {
            Some(s) => {
                let mut c = tokio::process::Command::new("faketime");
                c.args(["-f", &format!("{s:+}s"), MONGOLOCK])
                    .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
                c
            }
            None => tokio::process::Command::new(MONGOLOCK),
        };
        cmd.env_remove("MONGODB_URI")
            .env("DIR", dir)
            .env("SKEW", &label)
            .args(["--uri", &env.server.uri(), "--db", &env.db])
            .args(["exec", "--resource", "skewed", "--ttl", "3s"])
            .args(["--wait", "60s", "--", "sh", "-c", CHILD])
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let output = tokio::time::timeout(Duration::from_secs(90), cmd.output())
            .await
            .expect("mongolock exits in time")
            .expect("mongolock runs");
        if !output.status.success() {
            eprintln!("skew {label}: {}", text(&output.stderr));
        }
        statuses.push(output.status.code());
    }
    statuses
}

#[tokio::test(flavor = "multi_thread")]
async fn clients_whose_wall_clocks_are_minutes_off_never_overlap() {
    if !faketime_installed() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install faketime for this test"
        );
        common::skipped(
            "clients_whose_wall_clocks_are_minutes_off_never_overlap",
            "faketime is not installed (apt-get install faketime)",
        );
        return;
    }
    let env = Env::start("skew").await;
    let dir = temp_dir("skew");
    let started = now_secs();
    let (ahead, behind, exact) = tokio::join!(
        contend(&env, &dir, Some(300)),
        contend(&env, &dir, Some(-300)),
        contend(&env, &dir, None),
    );
    for statuses in [&ahead, &behind, &exact] {
        assert_eq!(statuses, &vec![Some(0); ROUNDS]);
    }
    assert!(
        !dir.join("overlaps").exists(),
        "children overlapped: {}",
        std::fs::read_to_string(dir.join("overlaps")).unwrap_or_default()
    );

    let log = std::fs::read_to_string(dir.join("log")).expect("the children logged");
    let rows: Vec<(i64, i64, i64)> = log
        .lines()
        .map(|line| {
            let f: Vec<i64> = line
                .split(' ')
                .map(|x| x.parse().expect("numbers"))
                .collect();
            (f[0], f[1], f[2])
        })
        .collect();
    assert_eq!(rows.len(), 3 * ROUNDS, "{log}");
    // Appended while holding the lock, so in grant order: tokens strictly increase.
    assert!(
        rows.windows(2).all(|w| w[0].0 < w[1].0),
        "tokens out of order:\n{log}"
    );
    // The skew was real: each child saw its own wall clock.
    let finished = now_secs();
    for (skew, seen) in rows.iter().map(|r| (r.1, r.2)) {
        assert!(
            seen - skew >= started - 5 && seen - skew <= finished + 5,
            "a child with skew {skew} saw {seen} between {started} and {finished}"
        );
        assert_eq!(rows.iter().filter(|r| r.1 == skew).count(), ROUNDS);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The overlap check can see: the same children started together without the lock collide.
#[tokio::test(flavor = "multi_thread")]
async fn the_overlap_check_sees_children_run_without_the_lock() {
    let dir = temp_dir("skew-control");
    let children: Vec<_> = (0..5)
        .map(|i| {
            tokio::process::Command::new("sh")
                .args(["-c", CHILD])
                .env("DIR", &dir)
                .env("SKEW", i.to_string())
                .env("MONGOLOCK_FENCING_TOKEN", "0")
                .spawn()
                .expect("sh starts")
        })
        .collect();
    for mut child in children {
        assert!(child.wait().await.expect("sh ends").success());
    }
    assert!(
        dir.join("overlaps").exists(),
        "five unlocked children started together should collide"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
