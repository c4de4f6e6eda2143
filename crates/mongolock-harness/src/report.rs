//! The summary of a harness session: runs, operations, faults, violations, controls and
//! timing figures, printed as a table.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::time::Duration;

use crate::check::{Check, Outcome, Violation};
use crate::controls::ControlResult;
use crate::history::Role;
use crate::history::{ExtraFault, ExtraLog, FaultKind};

/// One run's results.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The run's seed.
    pub seed: u64,
    /// What the checker found.
    pub outcome: Outcome,
    /// Faults injected, by kind.
    pub faults: BTreeMap<FaultKind, u64>,
    /// The harness's own faults injected, by kind.
    pub extra_faults: BTreeMap<ExtraFault, u64>,
    /// How the harness's own faults ended, as the clients (or the proxies' rules) saw it.
    pub extras: Vec<ExtraLog>,
    /// Acquire calls, and how many timed out or failed.
    pub attempts: u64,
    /// See [`RunResult::attempts`].
    pub timeouts: u64,
    /// See [`RunResult::attempts`].
    pub errors: u64,
    /// How long the run took.
    pub elapsed: Duration,
    /// What the server-side oracle found in the committed log.
    pub oracle: crate::oracle::Outcome,
    /// On a replica set: what the failover nemesis and the tap did ([`crate::replset`]).
    pub failover: Option<crate::replset::FailoverStats>,
}

/// Everything a session found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The session's seed (run `i` uses `seed + i`).
    pub seed: u64,
    /// The lease TTL of the workload.
    pub ttl: Duration,
    /// Every run.
    pub runs: Vec<RunResult>,
    /// The negative controls.
    pub controls: Vec<ControlResult>,
    /// On a replica set: its control, with `w: 1` and with the default write concern
    /// ([`crate::replset::control`]).
    pub set_control: Option<crate::replset::control::SetControl>,
}

/// The `q`-quantile (0..=1) of `values` by nearest rank; `None` if empty.
pub fn quantile(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.0} ms"))
}

impl Report {
    /// Every violation of every run, with its run's seed.
    pub fn violations(&self) -> Vec<(u64, &Violation)> {
        self.runs
            .iter()
            .flat_map(|r| r.outcome.violations.iter().map(move |v| (r.seed, v)))
            .collect()
    }

    /// Controls the checker caught.
    pub fn controls_caught(&self) -> usize {
        self.controls.iter().filter(|c| c.caught()).count()
    }

    /// Every violation the server-side oracle found, with its run's seed.
    pub fn server_violations(&self) -> Vec<(u64, &(crate::oracle::ServerCheck, String))> {
        self.runs
            .iter()
            .flat_map(|r| r.oracle.violations.iter().map(move |v| (r.seed, v)))
            .collect()
    }

    /// True if no run broke a promise (by the clients' logs or the server's), and every
    /// control was caught.
    pub fn passed(&self) -> bool {
        self.violations().is_empty()
            && self.server_violations().is_empty()
            && self.controls_caught() == self.controls.len()
            && self.failover_proved()
            && self.set_control.as_ref().is_none_or(|c| c.passed())
    }

    /// False if a run on a replica set never changed its primary (it proves nothing of a
    /// failover).
    pub fn failover_proved(&self) -> bool {
        (self.runs.iter()).all(|r| r.failover.as_ref().is_none_or(|f| !f.vacuous()))
    }

    fn sum(&self, f: impl Fn(&RunResult) -> usize) -> usize {
        self.runs.iter().map(f).sum()
    }

    fn all(&self, f: impl Fn(&Outcome) -> &Vec<f64>) -> Vec<f64> {
        self.runs
            .iter()
            .flat_map(|r| f(&r.outcome).iter().copied())
            .collect()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut t = String::new();
        let row = |t: &mut String, k: &str, v: String| {
            let _ = writeln!(t, "  {k:<42} {v}");
        };
        let _ = writeln!(t, "mongolock-harness  seed {}", self.seed);
        row(&mut t, "runs", self.runs.len().to_string());
        let elapsed: Duration = self.runs.iter().map(|r| r.elapsed).sum();
        row(
            &mut t,
            "run time",
            format!("{:.1} s", elapsed.as_secs_f64()),
        );
        row(
            &mut t,
            "acquire calls (timed out / failed)",
            format!(
                "{} ({} / {})",
                self.sum(|r| r.attempts as usize),
                self.sum(|r| r.timeouts as usize),
                self.sum(|r| r.errors as usize)
            ),
        );
        row(&mut t, "grants", self.sum(|r| r.outcome.grants).to_string());
        row(
            &mut t,
            "handoffs (to a conflicting holder)",
            self.sum(|r| r.outcome.handoffs).to_string(),
        );
        row(
            &mut t,
            "guarded writes (rejected by the fence)",
            format!(
                "{} ({})",
                self.sum(|r| r.outcome.writes),
                self.sum(|r| r.outcome.rejected_writes)
            ),
        );
        row(
            &mut t,
            "leases lost (not released)",
            self.sum(|r| r.outcome.losses).to_string(),
        );
        row(
            &mut t,
            "holders excused: force_release / clock jump",
            format!(
                "{} / {}",
                self.sum(|r| r.outcome.excused_force_release),
                self.sum(|r| r.outcome.excused_clock_jump)
            ),
        );
        let _ = writeln!(t, "by role: grants / handoffs");
        for role in Role::ALL {
            let (grants, handoffs) = self.runs.iter().fold((0, 0), |(g, h), r| {
                let c = r.outcome.by_role.get(&role).copied().unwrap_or_default();
                (g + c.grants, h + c.handoffs)
            });
            // The workload's semaphores have two permits.
            let name = match role {
                Role::Semaphore => "semaphore (2 permits)",
                _ => role.name(),
            };
            row(&mut t, name, format!("{grants} / {handoffs}"));
        }
        row(
            &mut t,
            "writer waits checked for preference (excused)",
            format!(
                "{} ({})",
                self.sum(|r| r.outcome.writer_waits_checked),
                self.sum(|r| r.outcome.writer_waits_excused)
            ),
        );
        row(
            &mut t,
            "election leaders judged for terms (excused)",
            format!(
                "{} ({})",
                self.sum(|r| r.outcome.leaders_checked),
                self.sum(|r| r.outcome.leaders_excused)
            ),
        );
        let mut proclaims: BTreeMap<&str, usize> = BTreeMap::new();
        let mut observations: BTreeMap<&str, usize> = BTreeMap::new();
        for r in &self.runs {
            for (outcome, n) in &r.outcome.proclaims {
                *proclaims.entry(outcome).or_default() += n;
            }
            for (source, n) in &r.outcome.observations {
                *observations.entry(source).or_default() += n;
            }
        }
        let proclaims: Vec<String> = proclaims.iter().map(|(k, n)| format!("{k} {n}")).collect();
        row(
            &mut t,
            "proclaims (judged by (7))",
            format!(
                "{} ({})",
                proclaims.join(", "),
                self.sum(|r| r.outcome.proclaims_checked)
            ),
        );
        let observations: Vec<String> = observations
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        row(
            &mut t,
            "observations judged by (8) (observer errors)",
            format!(
                "{} ({})",
                observations.join(", "),
                self.sum(|r| r.outcome.observer_errors as usize)
            ),
        );
        row(
            &mut t,
            "final reads judged, observers' last items (not)",
            format!(
                "{}, {} ({})",
                self.sum(|r| r.outcome.final_reads_checked),
                self.sum(|r| r.outcome.final_items_checked),
                self.sum(|r| r.outcome.final_reads_unjudged)
            ),
        );
        let _ = writeln!(t, "faults injected");
        let mut faults: BTreeMap<FaultKind, u64> = BTreeMap::new();
        for r in &self.runs {
            for (k, n) in &r.faults {
                *faults.entry(*k).or_default() += n;
            }
        }
        // How the nemeses on releases and acquires ended, over every run.
        let mut endings: BTreeMap<FaultKind, BTreeMap<String, usize>> = BTreeMap::new();
        for r in &self.runs {
            for (kind, ends) in &r.outcome.nemeses {
                for (end, n) in ends {
                    *endings
                        .entry(*kind)
                        .or_default()
                        .entry(end.clone())
                        .or_default() += n;
                }
            }
        }
        for kind in FaultKind::ALL {
            let asked = faults.get(&kind).copied().unwrap_or(0).to_string();
            let value = match kind {
                FaultKind::PauseAcquiring | FaultKind::KillAcquiring => format!(
                    "{asked} (carried out {})",
                    self.sum(|r| r.outcome.carried_out.get(&kind).copied().unwrap_or(0))
                ),
                _ if kind.is_nemesis() => {
                    let carried =
                        self.sum(|r| r.outcome.carried_out.get(&kind).copied().unwrap_or(0));
                    let how: Vec<String> = endings
                        .get(&kind)
                        .into_iter()
                        .flatten()
                        .map(|(end, n)| format!("{end} {n}"))
                        .collect();
                    format!("{asked} (carried out {carried}: {})", how.join(", "))
                }
                _ => asked,
            };
            row(&mut t, kind.name(), value);
        }
        for kind in ExtraFault::ALL {
            let asked: u64 = self
                .runs
                .iter()
                .map(|r| r.extra_faults.get(&kind).copied().unwrap_or(0))
                .sum();
            let mut how: BTreeMap<&str, usize> = BTreeMap::new();
            for log in self.runs.iter().flat_map(|r| &r.extras) {
                if log.kind == kind {
                    *how.entry(log.ended.as_str()).or_default() += 1;
                }
            }
            let how: Vec<String> = how.iter().map(|(k, n)| format!("{k} {n}")).collect();
            row(&mut t, kind.name(), format!("{asked} ({})", how.join(", ")));
        }
        row(
            &mut t,
            "let-go nemeses on multi-lock sets / leaders",
            format!(
                "{} / {}",
                self.sum(|r| r.outcome.recipe_let_gos.0),
                self.sum(|r| r.outcome.recipe_let_gos.1)
            ),
        );
        let mut releases: BTreeMap<&str, usize> = BTreeMap::new();
        for r in &self.runs {
            for (result, n) in &r.outcome.releases {
                *releases.entry(result).or_default() += n;
            }
        }
        let releases: Vec<String> = releases.iter().map(|(k, n)| format!("{k} {n}")).collect();
        row(&mut t, "handle release() results", releases.join(", "));
        row(
            &mut t,
            "holders force-released after their grant",
            self.sum(|r| r.outcome.revocations).to_string(),
        );
        let margins = self.all(|o| &o.delay_margins_ms);
        row(
            &mut t,
            "(9) grants judged after an unreleased lock-delay lease",
            format!(
                "{} ({} across primaries' clocks apart; margin past the delay: min {}, p50 {})",
                self.sum(|r| r.outcome.delay_grants_checked),
                self.sum(|r| r.outcome.delay_grants_across_clocks),
                ms(margins.iter().copied().reduce(f64::min)),
                ms(quantile(&margins, 0.5))
            ),
        );
        let mut notices: BTreeMap<&str, usize> = BTreeMap::new();
        for r in &self.runs {
            for (how, n) in &r.outcome.resume_notices {
                *notices.entry(how).or_default() += n;
            }
        }
        let notices: Vec<String> = notices.iter().map(|(k, n)| format!("{k} {n}")).collect();
        row(
            &mut t,
            "(10) leases resumed after a kill / beside a live one",
            format!(
                "{} / {} (the live one: {})",
                self.sum(|r| r.outcome.resumes.0),
                self.sum(|r| r.outcome.resumes.1),
                if notices.is_empty() {
                    "-".to_owned()
                } else {
                    notices.join(", ")
                }
            ),
        );
        row(
            &mut t,
            "(11) calls with a timeout judged (excused: paused)",
            format!(
                "{} ({})",
                self.sum(|r| r.outcome.timed_calls.0),
                self.sum(|r| r.outcome.timed_calls.1)
            ),
        );
        row(
            &mut t,
            "  same lock id asked again after a drop on an ending runtime (in time, granted)",
            format!(
                "{} ({}, {})",
                self.sum(|r| r.outcome.asked_again_after_ending_runtime.0),
                self.sum(|r| r.outcome.asked_again_after_ending_runtime.1),
                self.sum(|r| r.outcome.asked_again_after_ending_runtime.2)
            ),
        );
        let _ = writeln!(t, "violations (must be 0)");
        let mut counts: BTreeMap<Check, usize> = BTreeMap::new();
        for r in &self.runs {
            for (c, n) in r.outcome.by_check() {
                *counts.entry(c).or_default() += n;
            }
        }
        for check in Check::ALL {
            row(
                &mut t,
                check.name(),
                counts.get(&check).copied().unwrap_or(0).to_string(),
            );
        }
        let _ = writeln!(t, "server log (the oracle, from the change stream)");
        row(
            &mut t,
            "committed writes / grants / renewals",
            format!(
                "{} / {} / {}",
                self.sum(|r| r.oracle.events),
                self.sum(|r| r.oracle.grants),
                self.sum(|r| r.oracle.renewals)
            ),
        );
        row(
            &mut t,
            "grants nobody believed (longest life)",
            format!(
                "{} ({} ms)",
                self.sum(|r| r.oracle.orphans),
                self.runs
                    .iter()
                    .map(|r| r.oracle.longest_orphan_ms)
                    .max()
                    .unwrap_or(0)
            ),
        );
        row(
            &mut t,
            "orphans judged: believed / by call (excused)",
            format!(
                "{} / {} ({})",
                self.sum(|r| r.oracle.outlived_checked),
                self.sum(|r| r.oracle.unbelieved_checked),
                self.sum(|r| r.oracle.outlived_excused)
            ),
        );
        row(
            &mut t,
            "(S7), (S11)-(S13) judged across primaries' clocks apart",
            self.sum(|r| r.oracle.across_clocks).to_string(),
        );
        row(
            &mut t,
            "grants made after their acquire call ended",
            self.sum(|r| r.oracle.late_grants).to_string(),
        );
        row(
            &mut t,
            "longest an entry outlived its last holder",
            format!(
                "{} ms",
                self.runs
                    .iter()
                    .map(|r| r.oracle.longest_outlived_ms)
                    .max()
                    .unwrap_or(0)
            ),
        );
        row(
            &mut t,
            "releases returning Ok judged",
            format!(
                "{} ({} removed after a later step back, below their start's server time)",
                self.sum(|r| r.oracle.releases_checked),
                self.sum(|r| r.oracle.releases_after_step_back)
            ),
        );
        row(
            &mut t,
            "attempts granted again (judged by (S10))",
            self.sum(|r| r.oracle.regrants).to_string(),
        );
        let unusable: Vec<f64> = self
            .runs
            .iter()
            .flat_map(|r| r.oracle.let_go_unusable_ms.iter().copied())
            .collect();
        row(
            &mut t,
            "let-go lock unusable p50 / max (n)",
            format!(
                "{} / {} ({})",
                ms(quantile(&unusable, 0.5)),
                ms(unusable.iter().copied().reduce(f64::max)),
                self.sum(|r| r.oracle.let_go_checked)
            ),
        );
        row(
            &mut t,
            "  past let-go + TTL + command timeout",
            self.sum(|r| r.oracle.let_go_over_bound).to_string(),
        );
        let margins: Vec<f64> = self
            .runs
            .iter()
            .flat_map(|r| r.oracle.min_hold_margins_ms.iter().copied())
            .collect();
        row(
            &mut t,
            "(S12) leases with a hold judged / let go within",
            format!(
                "{} / {} (next grant past the hold's end: min {}, p50 {}, n {})",
                self.sum(|r| r.oracle.min_hold_judged),
                self.sum(|r| r.oracle.min_hold_within),
                ms(margins.iter().copied().reduce(f64::min)),
                ms(quantile(&margins, 0.5)),
                margins.len()
            ),
        );
        row(
            &mut t,
            "  next grant inside by a clock stepped back past the hold's end",
            self.sum(|r| r.oracle.min_hold_ran_out).to_string(),
        );
        row(
            &mut t,
            "(S9) places taken with the lock id's own entry in force (served)",
            format!(
                "{} ({})",
                self.sum(|r| r.oracle.own_entry_places.0),
                self.sum(|r| r.oracle.own_entry_places.1)
            ),
        );
        row(
            &mut t,
            "(S9) places taken out granting nothing (their call still waiting)",
            format!(
                "{} ({})",
                self.sum(|r| r.oracle.places_taken.0),
                self.sum(|r| r.oracle.places_taken.1)
            ),
        );
        row(
            &mut t,
            "(S13) losses reported after a step back judged (server kept the lease)",
            format!(
                "{} ({})",
                self.sum(|r| r.oracle.losses_judged.0),
                self.sum(|r| r.oracle.losses_judged.1)
            ),
        );
        let mut server: BTreeMap<crate::oracle::ServerCheck, usize> = BTreeMap::new();
        for r in &self.runs {
            for (c, n) in r.oracle.by_check() {
                *server.entry(c).or_default() += n;
            }
        }
        for check in crate::oracle::ServerCheck::ALL {
            row(
                &mut t,
                &check.to_string(),
                server.get(&check).copied().unwrap_or(0).to_string(),
            );
        }
        let _ = writeln!(t, "negative controls (must all be caught)");
        for c in &self.controls {
            let found: Vec<String> = c.found().iter().map(|(k, n)| format!("{k} x{n}")).collect();
            row(
                &mut t,
                c.name,
                format!(
                    "{} by {} [{}]",
                    if c.caught() { "caught" } else { "MISSED" },
                    c.expected.name(),
                    found.join("; ")
                ),
            );
        }
        let _ = writeln!(
            t,
            "controls caught: {}/{}",
            self.controls_caught(),
            self.controls.len()
        );
        let on_set: Vec<(u64, Option<&crate::replset::FailoverStats>)> = (self.runs.iter())
            .map(|r| (r.seed, r.failover.as_ref()))
            .collect();
        crate::replset::report(&mut t, &on_set, self.set_control.as_ref());
        let takeovers = self.all(|o| &o.takeovers_ms);
        let margins = self.all(|o| &o.notice_margins_ms);
        let _ = writeln!(t, "timing (TTL {} ms)", self.ttl.as_millis());
        row(
            &mut t,
            "takeover after a crash p50 / p99 (n)",
            format!(
                "{} / {} ({})",
                ms(quantile(&takeovers, 0.5)),
                ms(quantile(&takeovers, 0.99)),
                takeovers.len()
            ),
        );
        row(
            &mut t,
            "loss notice before next grant p50 / p1 (n)",
            format!(
                "{} / {} ({})",
                ms(quantile(&margins, 0.5)),
                ms(quantile(&margins, 0.01)),
                margins.len()
            ),
        );
        f.write_str(&t)
    }
}
