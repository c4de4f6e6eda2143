//! Runs the model checker: every scenario of the library's protocol, then every control.
//!
//! ```text
//! cargo run --release -p mongolock-model                       # the small bounds
//! cargo run --release -p mongolock-model -- --deep             # the deeper bounds
//! cargo run --release -p mongolock-model -- --deep --traces    # with every trace
//! cargo run --release -p mongolock-model -- --scenario "two guards in line" --bound 0,3,0,1,2,1,0,1
//!                                    # one scenario at one bound, without bug, no control
//! ```
//!
//! Prints, per run, the unique and generated states, the depth and the time, and each
//! counterexample as a trace (the known findings' and the controls' with `--traces`);
//! exits non-zero if the protocol fails a property that is not a known finding, or a
//! control is not caught.

use mongolock_model::{Config, LockModel, check, controls, findings, scenarios, trace};

/// The scenario `name` at `bound` (eight numbers, comma-separated, as
/// [`scenarios::bounds`] takes them); exits with a message if either is not one.
fn one_run(name: &str, bound: &str) -> Config {
    let numbers: Vec<u8> = match bound.split(',').map(str::parse).collect() {
        Ok(numbers) => numbers,
        Err(error) => {
            eprintln!("--bound {bound:?}: {error}");
            std::process::exit(2);
        }
    };
    let Ok(numbers) = <[u8; 8]>::try_from(numbers) else {
        eprintln!("--bound {bound:?}: eight numbers, comma-separated");
        std::process::exit(2);
    };
    match scenarios::named(name, scenarios::bounds(numbers)) {
        Some(config) => config,
        None => {
            eprintln!("--scenario {name:?}: no such scenario");
            std::process::exit(2);
        }
    }
}

fn main() {
    let deep = std::env::args().any(|arg| arg == "--deep");
    let traces = std::env::args().any(|arg| arg == "--traces");
    let value = |flag: &str| {
        let mut args = std::env::args().skip_while(|arg| arg != flag).skip(1);
        args.next()
    };
    let one = match (value("--scenario"), value("--bound")) {
        (None, None) => None,
        (Some(name), Some(bound)) => Some(one_run(&name, &bound)),
        _ => {
            eprintln!("--scenario and --bound go together");
            std::process::exit(2);
        }
    };
    let configs = if let Some(config) = &one {
        vec![config.clone()]
    } else if deep {
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
    let controls = match one {
        Some(_) => vec![],
        None => controls::all(),
    };
    for control in controls {
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
