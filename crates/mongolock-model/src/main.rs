//! Runs the model checker: every scenario of the library's protocol, then every control.
//!
//! ```text
//! cargo run --release -p mongolock-model                       # the small bounds
//! cargo run --release -p mongolock-model -- --deep             # the deeper bounds
//! cargo run --release -p mongolock-model -- --deep --traces    # with every trace
//! ```
//!
//! Prints, per run, the unique and generated states, the depth and the time, and each
//! counterexample as a trace (the known findings' and the controls' with `--traces`);
//! exits non-zero if the protocol fails a property that is not a known finding, or a
//! control is not caught.

use mongolock_model::{LockModel, check, controls, findings, scenarios, trace};

fn main() {
    let deep = std::env::args().any(|arg| arg == "--deep");
    let traces = std::env::args().any(|arg| arg == "--traces");
    let configs = if deep {
        scenarios::deep()
    } else {
        (scenarios::SMALL.into_iter())
            .flat_map(scenarios::all)
            .chain(scenarios::holds())
            .chain(scenarios::timed())
            .chain(scenarios::shared_small())
            .chain(scenarios::steps_back())
            .chain(scenarios::shared_holds())
            .chain(scenarios::purges())
            .chain(scenarios::limits())
            .chain(scenarios::line())
            .collect()
    };
    let mut failed = false;
    for config in configs {
        let outcome = check(&config, None);
        println!(
            "  protocol | {:<32} | {:?} | {:>9} unique states | {:>10} generated | depth {:>2} | {:>9.2?}",
            outcome.name,
            config.bounds,
            outcome.unique_states,
            outcome.states,
            outcome.max_depth,
            outcome.elapsed,
        );
        let model = LockModel::new(config.clone());
        for (property, path) in &outcome.counterexamples {
            let known = findings::is_known(config.name, property);
            failed |= !known;
            println!(
                "    {} \"{property}\" in {} steps",
                if known {
                    "known finding:"
                } else {
                    "NEW COUNTEREXAMPLE:"
                },
                path.clone().into_actions().len()
            );
            if traces || !known {
                println!("{}", trace::explain(&model, path));
            }
        }
    }
    for control in controls::all() {
        let outcome = check(&control.config, Some(control.breaks));
        let caught = (outcome.counterexamples.iter()).find(|(p, _)| *p == control.breaks);
        println!(
            "  control  | {:<66} | {:>8} unique states | {:>8.2?} | {}",
            control.name,
            outcome.unique_states,
            outcome.elapsed,
            match caught {
                Some((_, path)) => format!(
                    "caught: \"{}\" in {} steps",
                    control.breaks,
                    path.clone().into_actions().len()
                ),
                None => "NOT CAUGHT".to_owned(),
            }
        );
        match caught {
            Some((_, path)) if traces => {
                let model = LockModel::new(control.config.clone());
                println!("{}", trace::explain(&model, path));
            }
            Some(_) => {}
            None => failed = true,
        }
    }
    if failed {
        std::process::exit(1);
    }
}
