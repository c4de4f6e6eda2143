//! A short seeded run under faults: no promise may be broken, and every negative control
//! must be caught.

use std::time::Duration;

use mongolock_harness::{Options, run};

/// The stack of the thread that runs the harness, and of the runtime's workers: the run's
/// futures are large in a debug build, and a test thread's 2 MiB were not enough once the
/// controls numbered 33 (the `mongolock-harness` binary runs on the main thread's 8 MiB).
const STACK: usize = 16 << 20;

#[test]
fn a_short_seeded_run_breaks_no_promise_and_catches_every_control() {
    let mut options = Options::quick(20_240_601);
    options.fault_phase = Duration::from_secs(12);
    let runs = options.clone();
    let report = std::thread::Builder::new()
        .stack_size(STACK)
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_stack_size(STACK)
                .enable_all()
                .build()
                .expect("a runtime");
            runtime
                .block_on(run(&runs))
                .map_err(|error| error.to_string())
        })
        .expect("a thread for the run")
        .join()
        .expect("the run did not panic")
        .expect("the harness runs");
    println!("{report}");
    let violations = report.violations();
    assert!(
        violations.is_empty(),
        "seed {}: {} violation(s): {:#?}",
        options.seed,
        violations.len(),
        violations
    );
    assert_eq!(
        report.controls.len(),
        34,
        "thirty-four negative controls ran"
    );
    assert_eq!(
        report.controls_caught(),
        34,
        "controls caught: {}/34",
        report.controls_caught()
    );
    assert!(report.passed());
    let run = &report.runs[0];
    assert!(
        run.outcome.grants > 20,
        "the workload made progress under faults"
    );
    assert!(
        run.faults.values().sum::<u64>() > 10,
        "faults were injected"
    );
    assert!(run.outcome.proclaims_checked > 0, "leaders proclaimed");
    assert!(
        !run.outcome.observations.is_empty(),
        "observers reported leaders"
    );
    assert!(
        run.outcome.final_reads_checked > 0,
        "the election was read fresh at the end"
    );
    assert!(
        run.oracle.own_entry_places.1 > 0,
        "a lock id whose own entry was in force stood in line and was served"
    );
    assert!(
        mongolock_harness::workload::step_back::carried_out(&run.extras) > 0,
        "the server's clock went back past a let-go entry's grant in its hold"
    );
    assert!(
        mongolock_harness::workload::adoption::carried_out(&run.extras) > 0,
        "a restarted process sent its adoption after its dead process's late release landed"
    );
    for role in mongolock_harness::history::Role::ALL {
        let grants = run.outcome.by_role.get(&role).map_or(0, |c| c.grants);
        assert!(grants > 0, "{}: granted under faults", role.name());
    }
}
