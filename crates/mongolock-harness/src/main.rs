//! `mongolock-harness`: runs mongolock workloads under random faults on the emulator, checks
//! the history against the library's promises, runs the negative controls, prints a table,
//! and exits non-zero on any violation or uncaught control.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use mongolock_harness::{Options, run};

/// Fault-injection harness for mongolock.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// One short run plus the controls (CI; well under two minutes in a debug build).
    #[arg(long, conflicts_with = "long")]
    quick: bool,
    /// Five one-minute runs plus the controls (minutes).
    #[arg(long)]
    long: bool,
    /// The seed of the faults and workloads (random if not given; always printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Override the number of runs.
    #[arg(long)]
    runs: Option<u32>,
    /// Override the seconds of faults per run.
    #[arg(long)]
    seconds: Option<u64>,
    /// Skip the negative controls.
    #[arg(long)]
    no_controls: bool,
    /// Let an incarnation whose lease a twin resumed forget its guard instead of releasing
    /// it (its release is judged by default).
    #[arg(long)]
    forget_after_resume: bool,
    /// Run on a three-member replica set with the failover nemesis (step-downs, a stopped
    /// or partitioned primary, rollbacks, members' clocks apart, lag); the controls are the
    /// set's.
    #[arg(long)]
    replset: bool,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    let seed = args.seed.unwrap_or_else(rand::random);
    let mut options = if args.long {
        Options::long(seed)
    } else {
        Options::quick(seed)
    };
    if let Some(runs) = args.runs {
        options.runs = runs;
    }
    if let Some(seconds) = args.seconds {
        options.fault_phase = Duration::from_secs(seconds);
    }
    options.controls = !args.no_controls;
    options.replset = args.replset;
    options.workload.release_after_resume = !args.forget_after_resume;
    println!(
        "mongolock-harness: seed {seed}, {} run(s) of {} s of faults{}{}",
        options.runs,
        options.fault_phase.as_secs(),
        if options.replset {
            " on a three-member replica set (failover nemesis)"
        } else {
            ""
        },
        if options.controls {
            ", then the controls"
        } else {
            ""
        }
    );
    let report = match run(&options).await {
        Ok(report) => report,
        Err(error) => {
            eprintln!("harness setup failed (seed {seed}): {error}");
            return ExitCode::from(2);
        }
    };
    print!("{report}");
    let violations = report.violations();
    let server_violations = report.server_violations();
    if !server_violations.is_empty() {
        println!("server-side violations:");
        for (seed, (check, what)) in &server_violations {
            println!("  seed {seed}: {check}: {what}");
        }
    }
    if !violations.is_empty() {
        println!("violations:");
        for (seed, v) in &violations {
            println!("  seed {seed}: {v}");
        }
    }
    if report.passed() {
        println!("PASS (seed {seed})");
        ExitCode::SUCCESS
    } else {
        println!("FAIL (seed {seed}): rerun with --seed {seed}");
        ExitCode::FAILURE
    }
}
