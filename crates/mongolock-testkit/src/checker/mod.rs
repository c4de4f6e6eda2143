//! A checker of lock histories: what every holder of a lock did and saw, on one process's
//! monotonic clock, judged against the promises a lock service makes.
//!
//! [`history`] holds plain data: each holder's believed interval ([`history::HolderLog`]:
//! from its grant to its release, its loss notice or its death), its fencing token,
//! resource, mode and access, the writes it made to a record guarded by its token, and
//! around them the faults, operator actions, election campaigns, proclaims and observations
//! of a run. [`check::check`] reads a finished [`history::History`] and returns an
//! [`check::Outcome`]: every broken promise ([`check::Violation`], by [`check::Check`]) and
//! the figures a report shows. Nothing here drives a lock: mongolock's reliability harness
//! fills a history in from its guards under injected faults, and `mongolock demo` from its
//! event log, and both judge it here.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use mongolock_testkit::checker::check::{self, Check};
//! use mongolock_testkit::checker::history::{History, HolderLog, LetGo, Mode};
//!
//! let t0 = Instant::now();
//! let at = |ms: u64| t0 + Duration::from_millis(ms);
//! // Two holders of one mutex whose beliefs overlap from 50 to 100 ms.
//! let mut first = HolderLog::granted(1, 0, Mode::Exclusive, "report", 1);
//! (first.invoked_at, first.attempt_sent_at, first.granted_at) = (at(0), at(0), at(0));
//! first.released_at = Some(at(100));
//! first.let_go = Some(LetGo::Released);
//! let mut second = HolderLog::granted(2, 1, Mode::Exclusive, "report", 2);
//! (second.invoked_at, second.attempt_sent_at, second.granted_at) = (at(10), at(40), at(50));
//! let mut history = History::new(at(200));
//! history.modes.insert("report".into(), Mode::Exclusive);
//! history.holders = vec![first, second];
//! let outcome = check::check(&history);
//! assert!(outcome.has_on(Check::Exclusion, "report"));
//! assert_eq!(outcome.at_once["report"].holders, 2);
//! ```

pub mod check;
pub mod history;
