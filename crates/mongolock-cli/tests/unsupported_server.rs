//! Every command that talks to the server refuses one that cannot run mongolock's commands
//! (MongoDB before 4.4; a server without pipeline updates and `$$NOW`) with one clear line,
//! before anything else happens.

mod common;

use std::time::Duration;

use common::{run, text};
use mongolock_testkit::{ServerVersion, TestServer, TestServerBuilder};

/// `mongolock ARGS` against a server built by `builder`: its exit status and stderr.
async fn against(builder: TestServerBuilder, args: &[&str]) -> (Option<i32>, String) {
    let server = builder.start().await.expect("the emulator starts");
    let mut cmd = assert_cmd::Command::cargo_bin("mongolock").expect("the binary is built");
    cmd.env_remove("MONGODB_URI")
        .args(["--uri", &server.uri()])
        .args(args)
        .timeout(Duration::from_secs(60));
    let output = run(cmd).await;
    (output.status.code(), text(&output.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_refuses_an_unsupported_server_in_one_line() {
    let commands: [&[&str]; 5] = [
        &["status"],
        &["indexes"],
        &["exec", "--resource", "job", "--no-wait", "--", "true"],
        &["leader", "--name", "scheduler"],
        &["purge"],
    ];
    for (server, what) in [
        (
            TestServer::builder().server_version(ServerVersion::V4_2),
            "4.2",
        ),
        (
            TestServer::builder().without_pipeline_updates(),
            "no pipeline updates",
        ),
    ] {
        for args in commands {
            let (code, stderr) = against(server.clone(), args).await;
            assert_ne!(code, Some(0), "{what} {args:?}: {stderr}");
            let lines: Vec<&str> = stderr.lines().collect();
            assert_eq!(lines.len(), 1, "{what} {args:?}: one line: {stderr}");
            assert!(
                lines[0].contains("unsupported server")
                    && lines[0].contains("MongoDB has from 4.4 on"),
                "{what} {args:?}: {stderr}"
            );
        }
    }
}
