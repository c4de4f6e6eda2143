//! The library's protocol, model-checked: at the small bounds every property holds but for
//! the known findings (each of which must still be found), and every control (a bug found
//! before, put back) yields a counterexample to the property it breaks, with a readable
//! trace. The deeper bounds run with `--ignored` or the binary's `--deep`.

use std::collections::{BTreeSet, HashSet};

use mongolock_model::{
    Bounds, Config, LockModel, State, check, controls, findings, scenarios, trace,
};
use stateright::Model;

/// The scenarios the small bounds check, each at the bound that keeps a debug build quick.
fn small() -> Vec<Config> {
    let [first, second] = scenarios::SMALL;
    vec![
        scenarios::handles(first),
        scenarios::low_level(first),
        scenarios::keeper_alone(first),
        scenarios::two_resources(Bounds {
            retries: 0,
            ..first
        }),
        scenarios::handles(second),
        scenarios::low_level(second),
        scenarios::keeper_alone(Bounds {
            attempts: 2,
            ..second
        }),
    ]
    .into_iter()
    .chain(scenarios::holds())
    .chain(scenarios::timed())
    .chain(scenarios::shared_small())
    .chain(scenarios::steps_back())
    .chain(scenarios::shared_holds())
    .chain(scenarios::purges())
    .chain(scenarios::limits())
    .chain(scenarios::line())
    .collect()
}

/// Checks `configs`: every counterexample must be a known finding; returns the findings
/// seen, as (scenario, property).
fn check_clean(configs: Vec<Config>) -> BTreeSet<(&'static str, &'static str)> {
    let mut seen = BTreeSet::new();
    for config in configs {
        let outcome = check(&config, None);
        println!(
            "{} {:?}: {} unique states, depth {}, {:.2?}",
            outcome.name, config.bounds, outcome.unique_states, outcome.max_depth, outcome.elapsed
        );
        assert!(
            outcome.unique_states > 1_000,
            "{}: the checker explored almost nothing",
            outcome.name
        );
        let model = LockModel::new(config.clone());
        for (property, path) in &outcome.counterexamples {
            assert!(
                findings::is_known(config.name, property),
                "{}: a new counterexample to \"{property}\":\n{}",
                config.name,
                trace::explain(&model, path)
            );
            seen.insert((config.name, *property));
        }
    }
    seen
}

#[test]
fn the_protocol_holds_at_the_small_bounds_but_for_the_known_findings() {
    let seen = check_clean(small());
    // The findings these bounds reach: each must still be found (the others need deeper
    // bounds, `--deep`; see `findings::KNOWN`).
    let reached = findings::KNOWN;
    for known in reached {
        assert!(findings::is_known(known.0, known.1));
        assert!(
            seen.contains(&known),
            "the known finding {known:?} was not found: if the library fixed it, update the model and `findings::KNOWN`"
        );
    }
}

#[test]
fn every_control_yields_a_counterexample_to_the_property_it_breaks() {
    for control in controls::all() {
        let outcome = check(&control.config, Some(control.breaks));
        let Some((_, path)) = (outcome.counterexamples.iter()).find(|(p, _)| *p == control.breaks)
        else {
            panic!(
                "{}: no counterexample to \"{}\"",
                control.name, control.breaks
            );
        };
        let model = LockModel::new(control.config.clone());
        let explained = trace::explain(&model, path);
        println!(
            "{} ({} steps):\n{explained}",
            control.name,
            path.clone().into_actions().len()
        );
        assert!(explained.contains("  1. "), "the trace shows its steps");
        // The same scenario without the bug fails no property (beyond a known finding):
        // the counterexample is the bug's. Run to the end, this is a check of the whole
        // protocol at the control's bound too (a bound deeper than the small ones in some
        // dimension: two attempts with a kill, a repeat and a clock step for (p)), so that a
        // defect of a control's depth is caught in CI even where no control plants it. A
        // control whose bound is too heavy for that (`clean_run_deep`: (al)'s, 7.7 million
        // states) has it run with the deep bounds instead, which must hold it.
        let fixed = Config {
            bugs: Default::default(),
            ..control.config.clone()
        };
        if control.clean_run_deep {
            assert!(
                (scenarios::deep().iter())
                    .any(|deep| deep.name == fixed.name && deep.bounds == fixed.bounds),
                "{}: its run without the bug is in no deep run",
                control.name
            );
            continue;
        }
        let clean = check(&fixed, Some(control.breaks));
        let model = LockModel::new(fixed.clone());
        for (property, path) in &clean.counterexamples {
            assert!(
                findings::is_known(fixed.name, property),
                "{}: the protocol without the bug fails \"{property}\" at its bound:\n{}",
                control.name,
                trace::explain(&model, path)
            );
        }
    }
}

#[test]
#[ignore = "the deeper bounds take minutes: cargo test --release -p mongolock-model -- --ignored"]
fn the_protocol_holds_at_the_deep_bounds_but_for_the_known_findings() {
    check_clean(scenarios::deep());
}

/// What time alone does in a state, with no step of the server's clock and no force release
/// to excuse anybody: (an entry ran out, a guard's local deadline passed, a guard believes a
/// lease in the last tick before its deadline, the server ending it a margin after that tick,
/// an entry is within its lock-delay, an entry let go of within its minimum hold is in
/// force, one such entry's hold ended).
fn time_alone(model: &LockModel, state: &State) -> [bool; 6] {
    if state.jumps > 0 || state.forces > 0 {
        return [false; 6];
    }
    let now = state.now();
    let entries = || state.server.docs.iter().flat_map(|d| d.entries());
    let leases = || state.clients.iter().flat_map(|c| c.leases.iter());
    [
        entries().any(|e| !e.is_live(now)),
        leases().any(|l| !l.lost && state.rt >= l.deadline),
        (state.clients.iter().enumerate()).any(|(i, c)| {
            c.leases.iter().any(|l| {
                l.believes(state.rt)
                    && state.rt + 1 == l.deadline
                    && (state.server.docs[l.resource as usize].entry.as_ref()).is_some_and(|e| {
                        e.lock_id == model.lock_id(i as u8, state)
                            && e.token == l.token
                            && e.lease_end() == Some(now + 1 + model.config.margin)
                    })
            })
        }),
        entries().any(|e| !e.let_go && e.is_live(now) && !e.holds(now)),
        entries().any(|e| e.let_go && e.is_live(now)),
        entries().any(|e| e.let_go && !e.is_live(now)),
    ]
}

#[test]
fn time_passes_at_the_small_bounds() {
    // Every state of the timed scenarios, breadth first, counted by what time alone did in
    // it: each kind must occur, so that the properties are checked there (a lease that runs
    // out, a deadline that passes, unexcused).
    let mut counts = [0usize; 6];
    for config in scenarios::timed() {
        let model = LockModel::new(config);
        let mut seen: HashSet<State> = HashSet::new();
        let mut next: Vec<State> = model.init_states();
        let mut actions = vec![];
        while let Some(state) = next.pop() {
            if !seen.insert(state.clone()) {
                continue;
            }
            for (n, hit) in time_alone(&model, &state).into_iter().enumerate() {
                counts[n] += usize::from(hit);
            }
            actions.clear();
            model.actions(&state, &mut actions);
            for action in actions.drain(..) {
                if let Some(after) = model.next_state(&state, action)
                    && !seen.contains(&after)
                {
                    next.push(after);
                }
            }
        }
    }
    println!("states where, by time alone: {counts:?}");
    let names = [
        "an entry ran out",
        "a guard's local deadline passed",
        "a guard believes a lease in its last tick, the server ending it a margin later",
        "an entry is within its lock-delay",
        "an entry let go of within its minimum hold is in force",
        "a minimum hold ended",
    ];
    for (name, count) in names.iter().zip(counts) {
        assert!(count > 0, "no state at the small bounds where {name}");
    }
}
