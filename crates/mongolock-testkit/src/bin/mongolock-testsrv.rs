//! `mongolock-testsrv`: the emulator as a process, for other languages' clients and the CLI.

use std::process::ExitCode;
use std::time::Duration;

use mongolock_testkit::{ReplicaSet, TestServer};

const USAGE: &str =
    "usage: mongolock-testsrv [--port N] [--standalone] [--latency-ms N] [--ttl-monitor-secs N] \
     [--members N [--lag-ms N] [--election-timeout-ms N]]
  --members N: a replica set of N members on N consecutive ports from --port (free ports
  without --port); it prints one 'listening on' line per member, then the set's URI.";

/// The most threads that run commands at once.
const BLOCKING_THREADS: usize = 4;

fn parse_number(flag: &str, value: Option<String>) -> Result<u64, String> {
    let value = value.ok_or_else(|| format!("{flag} needs a value"))?;
    value
        .parse()
        .map_err(|_| format!("{flag}: '{value}' is not a non-negative integer"))
}

fn main() -> ExitCode {
    // Resident memory near what the server uses (see the module's docs).
    mongolock_testkit::arena::use_one_arena();
    let mut builder = TestServer::builder();
    let mut members: Option<usize> = None;
    let mut standalone = false;
    let mut port: Option<u16> = None;
    let mut lag = Duration::ZERO;
    let mut election_timeout: Option<Duration> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let parsed = match arg.as_str() {
            "--port" => parse_number("--port", args.next()).and_then(|p| {
                u16::try_from(p)
                    .map(|p| {
                        port = Some(p);
                        builder = builder.clone().port(p)
                    })
                    .map_err(|_| "--port: out of range".to_string())
            }),
            "--standalone" => {
                standalone = true;
                builder = builder.standalone(true);
                Ok(())
            }
            "--latency-ms" => parse_number("--latency-ms", args.next())
                .map(|ms| builder = builder.clone().latency(Duration::from_millis(ms))),
            "--ttl-monitor-secs" => parse_number("--ttl-monitor-secs", args.next()).map(|s| {
                builder = builder
                    .clone()
                    .ttl_monitor_interval(Duration::from_secs(s.max(1)))
            }),
            "--members" => parse_number("--members", args.next()).and_then(|n| {
                if (1..=50).contains(&n) {
                    members = Some(n as usize);
                    Ok(())
                } else {
                    Err("--members: between 1 and 50".to_string())
                }
            }),
            "--lag-ms" => {
                parse_number("--lag-ms", args.next()).map(|ms| lag = Duration::from_millis(ms))
            }
            "--election-timeout-ms" => parse_number("--election-timeout-ms", args.next())
                .map(|ms| election_timeout = Some(Duration::from_millis(ms))),
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => Err(format!("unknown argument '{other}'")),
        };
        if let Err(message) = parsed {
            eprintln!("mongolock-testsrv: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    if standalone && members.is_some() {
        eprintln!("mongolock-testsrv: --standalone and --members exclude each other\n{USAGE}");
        return ExitCode::from(2);
    }
    // Commands run on the blocking pool. A few threads are enough for a test server (and
    // with tokio's default of up to 512 threads, a burst of commands would start hundreds).
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(BLOCKING_THREADS)
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("mongolock-testsrv: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(members) = members {
        return runtime.block_on(async move {
            let mut set = ReplicaSet::builder()
                .members(members)
                .lag(lag)
                .server(builder);
            if let Some(p) = port {
                let ports = (0..members).map(|i| p.saturating_add(i as u16)).collect();
                set = set.ports(ports);
            }
            if let Some(timeout) = election_timeout {
                set = set.election_timeout(timeout);
            }
            let set = match set.start().await {
                Ok(set) => set,
                Err(error) => {
                    eprintln!("mongolock-testsrv: cannot listen: {error}");
                    return ExitCode::FAILURE;
                }
            };
            for host in set.hosts() {
                println!("listening on {host}");
            }
            println!("{}", set.uri());
            use std::io::Write;
            let _ = std::io::stdout().flush();
            let _ = tokio::signal::ctrl_c().await;
            set.shutdown().await;
            ExitCode::SUCCESS
        });
    }
    runtime.block_on(async move {
        let server = match builder.start().await {
            Ok(server) => server,
            Err(error) => {
                eprintln!("mongolock-testsrv: cannot listen: {error}");
                return ExitCode::FAILURE;
            }
        };
        println!("listening on {}", server.addr());
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let _ = tokio::signal::ctrl_c().await;
        server.shutdown().await;
        ExitCode::SUCCESS
    })
}
