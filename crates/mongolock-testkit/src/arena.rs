//! One allocator arena for a server process.
//!
//! glibc's `malloc` gives threads arenas of their own (up to eight per core) and returns a
//! freed chunk to the arena it came from, where it stays resident until that arena's top is
//! free. A command is decoded on a runtime worker and dropped on the blocking pool, so every
//! thread's arena grows to the largest burst it ever served (a keepalive of 10,000 leases is
//! a 6 MB command and several times that once parsed) and keeps it: with 10,000 held leases
//! the process held about 200 MB of which 70 were in use. With a single arena the bursts
//! reuse the same free memory, and the process stays near what it uses (under 90 MB).
//!
//! The arena count can only be chosen before the process starts (`GLIBC_TUNABLES`), so
//! [`use_one_arena`] starts the program again, in place, with it set.

/// The tunable that limits glibc to one arena.
const ONE_ARENA: &str = "glibc.malloc.arena_max=1";

/// Re-executes the current program with glibc's `malloc` limited to one arena, unless it
/// already is (or was asked for another limit in `GLIBC_TUNABLES`). Returns only when it
/// does not re-execute: on success the process goes on as the same program, same process
/// id, arguments and standard streams, from the start of `main`. Call it first in `main`,
/// before any thread or output. Does nothing on other platforms or C libraries.
pub fn use_one_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;

        let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
        if tunables.contains("glibc.malloc.arena_max") {
            return;
        }
        let Ok(program) = std::env::current_exe() else {
            return;
        };
        let tunables = if tunables.is_empty() {
            ONE_ARENA.to_string()
        } else {
            format!("{tunables}:{ONE_ARENA}")
        };
        // `exec` returns only if it failed; the program then runs with glibc's defaults.
        let _ = std::process::Command::new(program)
            .args(std::env::args_os().skip(1))
            .env("GLIBC_TUNABLES", tunables)
            .exec();
    }
}
