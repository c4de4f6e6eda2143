//! The Markdown tables: every figure absolute and as a ratio to the best library.

use std::fmt::Write as _;
use std::time::Duration;

use std::path::{Path, PathBuf};

use crate::emulator::Topology;
use crate::measure::{Outcome, Settings, Uncontended};
use crate::peers::MONGO_LOCK_ASYNC_POLL;
use crate::plot;
use crate::suite::{
    HandoffSeries, LibResults, NOT_RUN, PEERS_NOT_ON_THE_SET, throughput_scenarios,
};

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
    ratios(cells, best, fmt)
}

/// Formats a column where more is better: each value with its ratio to the largest one.
fn column_max(cells: &[Cell], fmt: impl Fn(f64) -> String) -> Vec<String> {
    let best = cells
        .iter()
        .filter_map(|c| match c {
            Cell::Value(v) => Some(*v),
            Cell::Text(_) => None,
        })
        .fold(f64::NEG_INFINITY, f64::max);
    ratios(cells, best, fmt)
}

/// Each value with its ratio to `best`.
fn ratios(cells: &[Cell], best: f64, fmt: impl Fn(f64) -> String) -> Vec<String> {
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

fn rate(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}/s")
    } else {
        format!("{v:.1}/s")
    }
}

fn bytes(v: f64) -> String {
    if v.abs() >= 10_240.0 {
        format!("{:.1} KiB", v / 1024.0)
    } else {
        format!("{v:.0} B")
    }
}

fn micros(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 100.0 {
        format!("{us:.0} µs")
    } else {
        format!("{us:.1} µs")
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

/// Writes the plots into `dir` and returns their paths.
pub(crate) fn plots(
    dir: &Path,
    s: &Settings,
    results: &[LibResults],
) -> crate::peers::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let series = |pick: fn(&LibResults) -> &HandoffSeries| -> plot::Series {
        results
            .iter()
            .map(|r| {
                let points = pick(r)
                    .iter()
                    .filter_map(|(w, h)| h.as_ref().ok().map(|h| (*w, millis(h.latency.p50))))
                    .collect();
                (r.lib.label().to_string(), points)
            })
            .collect()
    };
    let handoff = dir.join("handoff-p50.svg");
    plot::handoff(
        &handoff,
        "Handoff latency p50 (release → next waiter holds), 1 ms per round trip",
        &[
            (
                "replica set (ours: change streams)".to_string(),
                series(|r| &r.handoff),
            ),
            (
                "standalone (ours: backoff)".to_string(),
                series(|r| &r.handoff_standalone),
            ),
            (
                "three-member set (majority writes)".to_string(),
                series(|r| &r.three_members.1),
            ),
        ],
    )?;
    let throughput = dir.join("throughput.svg");
    let scenarios: Vec<String> = throughput_scenarios(s.throughput_tasks)
        .iter()
        .map(|(t, r)| {
            format!(
                "{t} tasks on {r} resource{}",
                if *r == 1 { "" } else { "s" }
            )
        })
        .collect();
    let libs: Vec<String> = results
        .iter()
        .map(|r| r.lib.label().split(' ').next().unwrap_or("").to_string())
        .collect();
    let values: Vec<Vec<Option<f64>>> = results
        .iter()
        .map(|r| {
            r.throughput
                .iter()
                .map(|(_, t)| t.as_ref().ok().map(|t| t.pairs_per_sec))
                .collect()
        })
        .collect();
    plot::throughput(
        &throughput,
        "Throughput: acquire + release pairs per second (one client per library)",
        &libs,
        &scenarios,
        &values,
    )?;
    Ok(vec![handoff, throughput])
}

/// Renders every table; also returns the number of measurements that failed (those left
/// out with `--measure` do not count).
pub(crate) fn render(
    env: &Environment,
    s: &Settings,
    results: &[LibResults],
    plots: &[PathBuf],
) -> (String, usize) {
    let mut out = String::new();
    let mut notes: Vec<String> = Vec::new();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let handoffs: Vec<String> = s
        .handoffs
        .iter()
        .map(|(w, n)| format!("{n} with {w} waiter{}", if *w == 1 { "" } else { "s" }))
        .collect();
    let _ = writeln!(
        out,
        "# mongolock-bench ({} mode)\n\n\
         Emulator: mongolock-testkit in child processes, a one-member replica set, a \
         standalone server and a three-member replica set, {} ms added to every reply. \
         Build: {}. Cores: {cores}. Run time: \
         {:.0} s. Uncontended: {} iterations (after 5 warm-up ones); refused attempts: {}; \
         handoffs: {} (each holder keeping the lock {}–{} ms, uniformly at random); \
         throughput: {:.0} s per scenario; server load: {} waiters for {:.0} s; keepalive: \
         {:.0} s windows; memory: {} leases, {} waiters.\n",
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
        handoffs.join(", "),
        s.hold.start.as_millis(),
        s.hold.end.as_millis(),
        s.throughput_for.as_secs_f64(),
        s.load_waiters,
        s.load_window.as_secs_f64(),
        s.keepalive_window.as_secs_f64(),
        s.memory_leases,
        s.memory_waiters,
    );

    // Round trips.
    let _ = writeln!(
        out,
        "## Round trips (commands sent to the lock database, from command monitoring)\n\n\
         Waiting: the commands one waiter sends per second while the lock is held (replica \
         set; from the server-load measurement below, divided by its {} waiters).\n",
        s.load_waiters
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
        "library".to_string(),
        "acquire + release".into(),
        "which".into(),
        "refused attempt".into(),
        "which".into(),
    ];
    for (i, k) in s.renew_sizes.iter().enumerate() {
        let cells: Vec<Cell> = results
            .iter()
            .map(|r| match &r.renew[i].1 {
                Ok(Some(n)) => Cell::Value(*n as f64),
                Ok(None) => Cell::Text("no renew".into()),
                Err(e) => err_cell(e, &mut notes),
            })
            .collect();
        columns.push(column(&cells, count));
        header.push(format!("renew {k} held"));
    }
    let waiting: Vec<Cell> = results
        .iter()
        .map(
            |r| match r.load.iter().find(|(t, _)| *t == Topology::ReplicaSet) {
                Some((_, Ok(l))) => Cell::Value(l.per_sec / s.load_waiters as f64),
                Some((_, Err(e))) => err_cell(e, &mut notes),
                None => Cell::Text("-".into()),
            },
        )
        .collect();
    columns.push(column(&waiting, rate));
    header.push("waiting (per waiter)".into());
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    table(&mut out, &header, rows(results, columns));

    // Uncontended latency.
    let _ = writeln!(out, "## Uncontended acquire + release latency\n");
    uncontended_table(&mut out, results, |r| &r.uncontended, "p50", &mut notes);

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
    let _ = writeln!(
        out,
        "### Replica set (mongolock waits on a change stream)\n"
    );
    handoff_table(&mut out, s, results, |r| &r.handoff, &mut notes);
    let _ = writeln!(
        out,
        "### Standalone server (no change streams: mongolock backs off and retries)\n"
    );
    handoff_table(&mut out, s, results, |r| &r.handoff_standalone, &mut notes);
    let _ = writeln!(
        out,
        "### Three-member replica set ({} ms between the primary and each secondary)\n\n\
         Every write waits for a majority: mongolock asks for `w: \"majority\", j: true`; the \
         peers send no write concern, and the emulator, as a 5.0+ server, defaults to \
         majority. Uncontended acquire + release first, then the handoffs.\n",
        crate::emulator::SET_LAG.as_millis()
    );
    uncontended_table(
        &mut out,
        results,
        |r| &r.three_members.0,
        "uncontended p50",
        &mut notes,
    );
    handoff_table(&mut out, s, results, |r| &r.three_members.1, &mut notes);
    let _ = writeln!(out, "How each library waits:\n");
    for r in results {
        match r.lib.waiting_standalone() {
            Some(other) => {
                let _ = writeln!(
                    out,
                    "- {}: {}; standalone: {other}",
                    r.lib.label(),
                    r.lib.waiting()
                );
            }
            None => {
                let _ = writeln!(out, "- {}: {}", r.lib.label(), r.lib.waiting());
            }
        }
    }
    let _ = writeln!(
        out,
        "\nThe peers poll the same way on both servers. `mongo-lock-async` has no default \
         poll interval; {} ms is the one its own test uses.\n",
        MONGO_LOCK_ASYNC_POLL.as_millis()
    );

    // Throughput.
    let _ = writeln!(
        out,
        "## Throughput (acquire + release pairs per second)\n\n\
         {} tasks of one process share one client of the library and loop acquire (waiting \
         the library's way) + release for {:.0} s; ratios are to the highest. Commands per \
         pair include the waiting of the others.\n",
        s.throughput_tasks,
        s.throughput_for.as_secs_f64()
    );
    let mut header = vec!["library".to_string()];
    let mut columns = Vec::new();
    for (i, (tasks, resources)) in throughput_scenarios(s.throughput_tasks).iter().enumerate() {
        header.push(format!(
            "{tasks} tasks on {resources} resource{}",
            if *resources == 1 { "" } else { "s" }
        ));
        header.push("commands / pair".into());
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for r in results {
            match &r.throughput[i].1 {
                Ok(t) => {
                    a.push(Cell::Value(t.pairs_per_sec));
                    b.push(Cell::Value(t.commands.per_op));
                }
                Err(e) => {
                    a.push(err_cell(e, &mut notes));
                    b.push(Cell::Text("-".into()));
                }
            }
        }
        columns.push(column_max(&a, rate));
        columns.push(column(&b, count));
    }
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    table(&mut out, &header, rows(results, columns));

    // Server load.
    let _ = writeln!(
        out,
        "## Load on the server under contention\n\n\
         One client holds a lock; {} waiters, each with its own client, wait for it the \
         library's way. After 0.5 s, the waiters' commands are counted for {:.0} s.\n",
        s.load_waiters,
        s.load_window.as_secs_f64()
    );
    let mut header = vec!["library".to_string()];
    let mut columns = Vec::new();
    for topology in [Topology::ReplicaSet, Topology::Standalone] {
        header.push(format!("{}: commands / s", topology.label()));
        header.push("which".into());
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for r in results {
            match r.load.iter().find(|(t, _)| *t == topology) {
                Some((_, Ok(l))) => {
                    a.push(Cell::Value(l.per_sec));
                    b.push(l.commands.breakdown.clone());
                }
                Some((_, Err(e))) => {
                    a.push(err_cell(e, &mut notes));
                    b.push("-".into());
                }
                None => {
                    a.push(Cell::Text("-".into()));
                    b.push("-".into());
                }
            }
        }
        columns.push(column(&a, rate));
        columns.push(b);
    }
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    table(&mut out, &header, rows(results, columns));

    // Keepalive.
    let _ = writeln!(
        out,
        "## Keepalive cost (commands per second to keep N leases alive)\n\n\
         One client holds N mutex guards with a {} s TTL (renewed every third of it, the \
         default ratio; with the default 30 s TTL the rate is {:.1}× this) and its commands \
         are counted for {:.0} s, after one renewal period with no acquire in flight. A lease \
         lost by the end of the window is an error.\n",
        s.keepalive_ttl.as_secs(),
        s.keepalive_ttl.as_secs_f64() / 30.0,
        s.keepalive_window.as_secs_f64()
    );
    let mut header = vec!["library".to_string()];
    let mut columns = Vec::new();
    for (i, n) in s.keepalive_leases.iter().enumerate() {
        header.push(format!("{n} lease{}", if *n == 1 { "" } else { "s" }));
        let cells: Vec<Cell> = results
            .iter()
            .map(|r| match &r.keepalive[i].1 {
                Ok(Some(k)) if k.lost > 0 => {
                    err_cell(&format!("{} of {n} leases lost", k.lost), &mut notes)
                }
                Ok(Some(k)) => Cell::Value(k.per_sec),
                Ok(None) => Cell::Text("no keepalive".into()),
                Err(e) => err_cell(e, &mut notes),
            })
            .collect();
        columns.push(column(&cells, rate));
    }
    header.push("which".into());
    columns.push(
        results
            .iter()
            .map(|r| match r.keepalive.last() {
                Some((_, Ok(Some(k)))) => k.commands.breakdown.clone(),
                _ => "-".into(),
            })
            .collect(),
    );
    // The renewal names every lease: its size at the largest N, against the 16 MiB limit.
    header.push("renewal command".into());
    columns.push(
        results
            .iter()
            .map(|r| match r.keepalive.last() {
                Some((_, Ok(Some(k)))) => format!(
                    "{} KiB ({:.1}% of 16 MiB)",
                    k.command_bytes / 1024,
                    k.command_bytes as f64 * 100.0 / (16.0 * 1024.0 * 1024.0)
                ),
                _ => "-".into(),
            })
            .collect(),
    );
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    table(&mut out, &header, rows(results, columns));

    // Groups.
    let base = s.group_sizes.first().copied().unwrap_or(1);
    let _ = writeln!(
        out,
        "## Group operations (one lock id holding N locks)\n\n\
         Time per lock of one `renew` (median of 5) and one `unlock` (median of 5 up to 1,000 \
         locks, 1 run above) of the whole group, and its commands; ratios are to the \
         {base}-lock group of the same run (flat is 1.00×, below is cheaper per lock).\n"
    );
    let mut header = vec!["library".to_string()];
    let mut columns = Vec::new();
    for op in ["renew", "unlock"] {
        let base_time = results.iter().find_map(|r| {
            r.groups.iter().find_map(|(n, g)| match g {
                Ok(Some(g)) if *n == base => Some(pick(g, op).per_lock(base)),
                _ => None,
            })
        });
        for (i, n) in s.group_sizes.iter().enumerate() {
            header.push(format!("{op} {n}: per lock"));
            header.push("commands".into());
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for r in results {
                match &r.groups[i].1 {
                    Ok(Some(g)) => {
                        let per = pick(g, op).per_lock(*n);
                        a.push(match base_time {
                            Some(b) if !b.is_zero() => format!(
                                "{} ({:.2}×)",
                                micros(per),
                                per.as_secs_f64() / b.as_secs_f64()
                            ),
                            _ => micros(per),
                        });
                        b.push(count(pick(g, op).commands));
                    }
                    Ok(None) => {
                        a.push("no groups".into());
                        b.push("-".into());
                    }
                    Err(e) => {
                        err_cell(e, &mut notes);
                        a.push(format!("error [{}]", notes.len()));
                        b.push("-".into());
                    }
                }
            }
            columns.push(a);
            columns.push(b);
        }
    }
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    table(&mut out, &header, rows(results, columns));

    // Memory.
    let _ = writeln!(
        out,
        "## Client memory\n\n\
         Bytes allocated and not freed in the benchmark's process (a counting global \
         allocator; the emulator is another process), before and after one client takes {} \
         leases, or {} tasks of one client wait for a lock held elsewhere, divided by that \
         number. The vector that keeps the guards is allocated before the first reading; what \
         each guard owns on the heap counts, and so do the waiting tasks.\n",
        s.memory_leases, s.memory_waiters
    );
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for r in results {
        match &r.memory {
            Ok(m) => {
                a.push(Cell::Value(m.per_lease));
                b.push(Cell::Value(m.per_waiter));
            }
            Err(e) => {
                a.push(err_cell(e, &mut notes));
                b.push(Cell::Text("-".into()));
            }
        }
    }
    table(
        &mut out,
        &["library", "per held lease", "per waiter"],
        rows(results, vec![column(&a, bytes), column(&b, bytes)]),
    );

    if !plots.is_empty() {
        let _ = writeln!(out, "## Plots\n");
        for p in plots {
            let shown = p
                .canonicalize()
                .map_or_else(|_| p.display().to_string(), |c| c.display().to_string());
            let _ = writeln!(out, "- {shown}");
        }
        out.push('\n');
    }

    let _ = writeln!(out, "## Not run\n");
    let _ = writeln!(
        out,
        "- mongo-lock 0.3.0 (sync): the blocking twin of mongo-lock-async, same upsert and \
         delete; not run in this async harness (same round trips as mongo-lock-async).\n\
         - Not measured: handoff after a holder dies (lease expiry).\n"
    );
    if !notes.is_empty() {
        let _ = writeln!(out, "## Errors\n");
        for (i, n) in notes.iter().enumerate() {
            let _ = writeln!(out, "{}. {n}", i + 1);
        }
        out.push('\n');
    }
    // Left out on purpose (`--measure`, quick mode) is no failure.
    let failed = (notes.iter())
        .filter(|n| ![NOT_RUN, PEERS_NOT_ON_THE_SET].contains(&n.as_str()))
        .count();
    (out, failed)
}

fn pick(g: &crate::groups::Group, op: &str) -> crate::groups::GroupOp {
    if op == "renew" { g.renew } else { g.unlock }
}

/// One handoff table: p50, p99 and commands per handoff for each waiter count.
/// The table of each library's uncontended acquire + release latency, p50 (headed `p50`)
/// and p99, from `pick`.
fn uncontended_table(
    out: &mut String,
    results: &[LibResults],
    pick: fn(&LibResults) -> &Outcome<Uncontended>,
    p50: &str,
    notes: &mut Vec<String>,
) {
    let (mut p50s, mut p99s) = (Vec::new(), Vec::new());
    for r in results {
        match pick(r) {
            Ok(u) => {
                p50s.push(Cell::Value(millis(u.latency.p50)));
                p99s.push(Cell::Value(millis(u.latency.p99)));
            }
            Err(e) => {
                p50s.push(err_cell(e, notes));
                p99s.push(Cell::Text("-".into()));
            }
        }
    }
    table(
        out,
        &["library", p50, "p99"],
        rows(results, vec![column(&p50s, ms), column(&p99s, ms)]),
    );
}

fn handoff_table(
    out: &mut String,
    s: &Settings,
    results: &[LibResults],
    series: fn(&LibResults) -> &HandoffSeries,
    notes: &mut Vec<String>,
) {
    let mut header = vec!["library".to_string()];
    let mut columns = Vec::new();
    for (i, (w, _)) in s.handoffs.iter().enumerate() {
        let plural = if *w == 1 { "" } else { "s" };
        header.push(format!("{w} waiter{plural}: p50"));
        header.push("p99".into());
        header.push("commands / handoff".into());
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        for r in results {
            match &series(r)[i].1 {
                Ok(h) => {
                    a.push(Cell::Value(millis(h.latency.p50)));
                    b.push(Cell::Value(millis(h.latency.p99)));
                    c.push(Cell::Value(h.commands.per_op));
                }
                Err(e) => {
                    a.push(err_cell(e, notes));
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
    table(out, &header, rows(results, columns));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_to_the_best_in_the_column() {
        let cells = [
            Cell::Value(2.0),
            Cell::Value(4.0),
            Cell::Text("no renew".into()),
        ];
        assert_eq!(
            column(&cells, count),
            ["2 (1.00×)", "4 (2.00×)", "no renew"]
        );
        assert_eq!(
            column_max(&cells, count),
            ["2 (0.50×)", "4 (1.00×)", "no renew"]
        );
        // A zero best gives no ratio rather than an infinite one.
        assert_eq!(
            column(&[Cell::Value(0.0), Cell::Value(3.0)], count),
            ["0", "3"]
        );
    }

    #[test]
    fn units() {
        assert_eq!(ms(254.3), "254 ms");
        assert_eq!(ms(11.43), "11.4 ms");
        assert_eq!(ms(5.528), "5.53 ms");
        assert_eq!(bytes(750.2), "750 B");
        assert_eq!(bytes(22_257.0), "21.7 KiB");
        assert_eq!(rate(552.0), "552/s");
        assert_eq!(rate(0.2), "0.2/s");
        assert_eq!(micros(Duration::from_micros(512)), "512 µs");
    }
}
