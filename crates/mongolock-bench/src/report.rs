//! The Markdown tables: every figure absolute and as a ratio to the best library.

use std::fmt::Write as _;
use std::time::Duration;

use crate::measure::{LibResults, Settings};
use crate::peers::MONGO_LOCK_ASYNC_POLL;

/// How the run was made.
pub(crate) struct Environment {
    pub(crate) quick: bool,
    pub(crate) latency: Duration,
    pub(crate) elapsed: Duration,
}

/// The value or why there is none.
enum Cell {
    Value(f64),
    Text(String),
}

/// Formats a column: each value with its ratio to the smallest value in the column.
fn column(cells: &[Cell], fmt: impl Fn(f64) -> String) -> Vec<String> {
    let best = cells
        .iter()
        .filter_map(|c| match c {
            Cell::Value(v) => Some(*v),
            Cell::Text(_) => None,
        })
        .fold(f64::INFINITY, f64::min);
    cells
        .iter()
        .map(|c| match c {
            Cell::Value(v) if best > 0.0 && best.is_finite() => {
                format!("{} ({:.2}×)", fmt(*v), v / best)
            }
            Cell::Value(v) => fmt(*v),
            Cell::Text(t) => t.clone(),
        })
        .collect()
}

fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else if v >= 10.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.2} ms")
    }
}

fn count(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn err_cell(e: &str, notes: &mut Vec<String>) -> Cell {
    notes.push(e.to_string());
    Cell::Text(format!("error [{}]", notes.len()))
}

fn table(out: &mut String, header: &[&str], rows: Vec<Vec<String>>) {
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let _ = writeln!(
        out,
        "|{}",
        header.iter().map(|_| "---|").collect::<String>()
    );
    for row in rows {
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    out.push('\n');
}

/// Transposes columns of formatted cells into rows, with the library label first.
fn rows(results: &[LibResults], columns: Vec<Vec<String>>) -> Vec<Vec<String>> {
    results
        .iter()
        .enumerate()
        .map(|(i, r)| {
            std::iter::once(r.lib.label().to_string())
                .chain(columns.iter().map(|c| c[i].clone()))
                .collect()
        })
        .collect()
}

/// Renders every table.
pub(crate) fn render(env: &Environment, s: &Settings, results: &[LibResults]) -> String {
    let mut out = String::new();
    let mut notes: Vec<String> = Vec::new();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let _ = writeln!(
        out,
        "# mongolock-bench ({} mode)\n\n\
         Emulator: mongolock-testkit, in process, one-member replica set, {} ms added to every \
         reply. Build: {}. Cores: {cores}. Run time: {:.0} s. Uncontended: {} iterations \
         (after 5 warm-up ones); refused attempts: {}; handoffs: {} per waiter count, each \
         holder keeping the lock {}–{} ms (uniformly at random).\n",
        if env.quick { "quick" } else { "full" },
        env.latency.as_millis(),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        env.elapsed.as_secs_f64(),
        s.iterations,
        s.failed_attempts,
        s.handoffs,
        s.hold.start.as_millis(),
        s.hold.end.as_millis(),
    );

    // Round trips.
    let _ = writeln!(
        out,
        "## Round trips (commands sent to the lock database, from command monitoring)\n"
    );
    let acq: Vec<Cell> = results
        .iter()
        .map(|r| match &r.uncontended {
            Ok(u) => Cell::Value(u.commands.per_op),
            Err(e) => err_cell(e, &mut notes),
        })
        .collect();
    let failed: Vec<Cell> = results
        .iter()
        .map(|r| match &r.failed {
            Ok(p) => Cell::Value(p.per_op),
            Err(e) => err_cell(e, &mut notes),
        })
        .collect();
    let mut columns = vec![column(&acq, count)];
    columns.push(
        results
            .iter()
            .map(|r| match &r.uncontended {
                Ok(u) => u.commands.breakdown.clone(),
                Err(_) => "-".into(),
            })
            .collect(),
    );
    columns.push(column(&failed, count));
    columns.push(
        results
            .iter()
            .map(|r| match &r.failed {
                Ok(p) => p.breakdown.clone(),
                Err(_) => "-".into(),
            })
            .collect(),
    );
    let mut header = vec![
        "library",
        "acquire + release",
        "which",
        "refused attempt",
        "which",
    ];
    let renew_headers: Vec<String> = s
        .renew_sizes
        .iter()
        .map(|k| format!("renew {k} held"))
        .collect();
    for (i, _) in s.renew_sizes.iter().enumerate() {
        let cells: Vec<Cell> = results
            .iter()
            .map(|r| match &r.renew[i].1 {
                Ok(Some(n)) => Cell::Value(*n as f64),
                Ok(None) => Cell::Text("no renew".into()),
                Err(e) => err_cell(e, &mut notes),
            })
            .collect();
        columns.push(column(&cells, count));
    }
    header.extend(renew_headers.iter().map(String::as_str));
    table(&mut out, &header, rows(results, columns));

    // Uncontended latency.
    let _ = writeln!(out, "## Uncontended acquire + release latency\n");
    let mut p50 = Vec::new();
    let mut p99 = Vec::new();
    for r in results {
        match &r.uncontended {
            Ok(u) => {
                p50.push(Cell::Value(millis(u.latency.p50)));
                p99.push(Cell::Value(millis(u.latency.p99)));
            }
            Err(e) => {
                p50.push(err_cell(e, &mut notes));
                p99.push(Cell::Text("-".into()));
            }
        }
    }
    table(
        &mut out,
        &["library", "p50", "p99"],
        rows(results, vec![column(&p50, ms), column(&p99, ms)]),
    );

    // Handoff.
    let _ = writeln!(
        out,
        "## Handoff latency (holder's release call → next waiter holds)\n\n\
         Every waiter has its own driver client, as separate processes would; the commands \
         are those all participants sent per handoff in steady state (waiters polling while \
         the holder holds the lock, {}–{} ms, count too).\n",
        s.hold.start.as_millis(),
        s.hold.end.as_millis(),
    );
    let mut header = vec!["library".to_string()];
    let mut columns = Vec::new();
    for (i, w) in s.waiters.iter().enumerate() {
        let plural = if *w == 1 { "" } else { "s" };
        header.push(format!("{w} waiter{plural}: p50"));
        header.push("p99".into());
        header.push("commands / handoff".into());
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        for r in results {
            match &r.handoff[i].1 {
                Ok(h) if h.latency.n < s.handoffs => {
                    a.push(err_cell(
                        &format!("only {} of {} handoffs measured", h.latency.n, s.handoffs),
                        &mut notes,
                    ));
                    b.push(Cell::Text("-".into()));
                    c.push(Cell::Text("-".into()));
                }
                Ok(h) => {
                    a.push(Cell::Value(millis(h.latency.p50)));
                    b.push(Cell::Value(millis(h.latency.p99)));
                    c.push(Cell::Value(h.commands.per_op));
                }
                Err(e) => {
                    a.push(err_cell(e, &mut notes));
                    b.push(Cell::Text("-".into()));
                    c.push(Cell::Text("-".into()));
                }
            }
        }
        columns.push(column(&a, ms));
        columns.push(column(&b, ms));
        columns.push(column(&c, count));
    }
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    table(&mut out, &header, rows(results, columns));
    let _ = writeln!(out, "How each library waits:\n");
    for r in results {
        let _ = writeln!(out, "- {}: {}", r.lib.label(), r.lib.waiting());
    }
    let _ = writeln!(
        out,
        "\n`mongo-lock-async` has no default poll interval; {} ms is the one its own test uses.\n",
        MONGO_LOCK_ASYNC_POLL.as_millis()
    );

    let _ = writeln!(out, "## Not run\n");
    let _ = writeln!(
        out,
        "- mongo-lock 0.3.0 (sync): the blocking twin of mongo-lock-async, same upsert and \
         delete; not run in this async harness (same round trips as mongo-lock-async).\n\
         - Not yet measured: throughput on one hot key, handoff after a holder dies (lease \
         expiry), load on the server per waiter over time, standalone server (our waiters \
         back off instead of watching), plots.\n"
    );
    if !notes.is_empty() {
        let _ = writeln!(out, "## Errors\n");
        for (i, n) in notes.iter().enumerate() {
            let _ = writeln!(out, "{}. {n}", i + 1);
        }
        out.push('\n');
    }
    out
}
