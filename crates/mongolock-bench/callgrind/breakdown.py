#!/usr/bin/env python3
"""Reads the callgrind profiles `pair_cost.sh` wrote and prints where an uncontended
acquire + release pair's instructions go, as Markdown.

Usage: breakdown.py DIR WARM PAIRS LIB [LIB...]

DIR holds, for each LIB, the files `LIB.out.<dump>-<thread>` that
`valgrind --tool=callgrind --separate-threads=yes --dump-after=...` wrote for
`examples/pair_cost.rs`. Each profile is one call on one thread: on the client's thread
(01) the calls `acquire_once`, `release_once` and `idle_once`; on the server's runtime and
its blocking pool, the marks made after each of them (`server_mark`, `blocking_mark`), so
the k-th mark of a thread closes the same call as the client's k-th profile.

For each kind of call, the figure is the mean over the measured pairs (the WARM first
ones are left out) less the mean of the idle calls (the marks and the background), after
leaving out the pairs in which a call's total is more than 5% off that kind's median on
any thread, or by more than 20,000 instructions for an idle call (a driver heartbeat, a
monitor's check or the emulator's TTL pass fell in it).

Instructions are counted where they run ("self" cost), by the source file of each
instruction (inlined code counts for the file it was written in, as the debug line tables
say), grouped by crate, and by file within the workspace's crates and the driver. Calls to
malloc, calloc and realloc are counted per thread too (each heap allocation).
"""

import collections
import os
import re
import statistics
import sys

ALLOC = {"malloc", "calloc", "realloc", "posix_memalign", "aligned_alloc"}
REGISTRY = re.compile(r"/registry/src/[^/]+/([A-Za-z0-9_\-]+?)-\d+\.\d+\.\d+[^/]*/(.*)")
WORKSPACE = re.compile(r"/crates/([a-z\-]+)/src/(.*)")
RUSTC = re.compile(r"/rustc/[0-9a-f]+/library/([a-z_]+)/")


def group(obj, path, fn):
    """The row an instruction of `fn` in source file `path` of object `obj` is counted in."""
    m = WORKSPACE.search(path)
    if m:
        crate, rel = m.groups()
        return f"{crate}: {rel}"
    m = REGISTRY.search(path)
    if m:
        crate, rel = m.groups()
        if crate in ("mongodb", "bson"):
            parts = rel.split("/")
            sub = "/".join(parts[1:3]) if len(parts) > 2 else parts[-1]
            return f"{crate}: {sub}"
        if crate.startswith("tracing"):
            return "tracing (spans, events)"
        if crate.startswith("metrics"):
            return "metrics"
        return crate
    m = RUSTC.search(path)
    if m:
        return f"rust {m.group(1)}"
    if "malloc" in path or fn in ALLOC or fn.startswith(("_int_", "free", "__libc_")):
        return "libc malloc/free"
    if "memmove" in path or "memcpy" in path or "memset" in path or "memcmp" in path:
        return "libc memcpy/memset/memcmp"
    base = os.path.basename(obj) if obj else "?"
    return f"other ({base})"


def parse(path):
    """(total, {group: self cost}, allocation calls, trigger) of one callgrind profile."""
    names = {"ob": {}, "fl": {}, "fn": {}}
    costs = collections.Counter()
    inclusive = collections.Counter()
    allocs = 0
    total = 0
    trigger = ""
    ob = fl = fn = ""
    cur_file = ""
    skip_next = False
    call_target = ""
    call_count = 0

    def name(kind, text):
        text = text.strip()
        m = re.match(r"\((\d+)\)\s*(.*)", text)
        if not m:
            return text
        idx, rest = m.groups()
        table = names["fl" if kind in ("fl", "fi", "fe", "cfi", "cfl") else
                      "fn" if kind in ("fn", "cfn") else "ob"]
        if rest:
            table[idx] = rest
        return table.get(idx, "?")

    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line or line[0] == "\n":
                continue
            c = line[0]
            if c.isdigit() or c in "+-*":
                parts = line.split()
                if len(parts) < 2:
                    continue
                value = int(parts[1])
                if skip_next:
                    skip_next = False
                    if call_target in ALLOC and not fn.startswith(("_int_", "malloc", "realloc", "calloc")):
                        allocs += call_count
                    if call_target != fn:
                        inclusive[fn] += value
                    continue
                costs[group(ob, cur_file, fn)] += value
                inclusive[fn] += value
                continue
            key, _, rest = line.partition("=")
            if key == "ob":
                ob = name("ob", rest)
            elif key == "fl":
                fl = name("fl", rest)
                cur_file = fl
            elif key in ("fi", "fe"):
                cur_file = name(key, rest)
            elif key == "fn":
                fn = name("fn", rest)
                cur_file = fl
            elif key in ("cob", "cfi", "cfl"):
                name(key, rest)
            elif key == "cfn":
                call_target = name("cfn", rest)
            elif key == "calls":
                call_count = int(rest.split()[0])
                skip_next = True
            elif line.startswith("totals:"):
                total = int(line.split()[1])
            elif line.startswith("desc: Trigger:"):
                trigger = line.split("=", 1)[-1].strip()
    return total, costs, allocs, trigger, inclusive


# Functions whose inclusive cost (their own instructions and those of everything they call)
# is shown, with what they stand for; a row sums the functions its pattern matches (their
# `'2` recursion copies left out, which their first level already includes).
FUNCTIONS = {
    "client": [
        ("mongolock: build the acquire command (command::acquire::command)",
         r"^mongolock::command::acquire::command$"),
        ("mongolock: build the release command (command::release::release_command)",
         r"^mongolock::command::release::release_command$"),
        ("mongolock + driver: write_repeating outside the driver's future (the clone of the command for the try, the builder, the rest)",
         None),
        ("mongolock: read the acquire's reply (command::acquire::interpret)",
         r"^mongolock::command::acquire::interpret$"),
        ("driver: run_command (encode, send, receive, decode the reply)",
         r"^<mongodb::action::run_command::RunCommand as core::future::into_future::IntoFuture>::into_future::\{\{closure\}\}$"),
        ("driver: Database::run_command, the builder (the command Document to bytes, the Document dropped)",
         r"^mongodb::action::run_command::<impl mongodb::db::Database>::run_command$"),
        ("driver: the command Document to bytes (RawDocumentBuf::from_document)",
         r"^bson::raw::document_buf::RawDocumentBuf::from_document$"),
        ("driver: the reply's bytes to a Document (TryFrom<RawDocumentBuf> for Document)",
         r"^bson::raw::document_buf::<impl core::convert::TryFrom<bson::raw::document_buf::RawDocumentBuf> for bson::document::Document>::try_from$"),
        ("mongolock: Context::write_repeating (the library's whole write, driver included)",
         r"^mongolock::command::Context::write_repeating::\{\{closure\}\}$"),
        ("Bson / Document clones (Clone for Bson, first level)",
         r"^<bson::bson::Bson as core::clone::Clone>::clone$"),
    ],
    "server": [
        ("read a request from the socket (wire::read_request)", r"^mongolock_testkit::wire::read_request::\{\{closure\}\}$"),
        ("its bytes to a Document (wire::to_document)", r"^mongolock_testkit::wire::to_document$"),
        ("encode the reply (wire::encode_op_msg)", r"^mongolock_testkit::wire::encode_op_msg$"),
        ("dispatch (commands::dispatch)", r"^mongolock_testkit::commands::dispatch::\{\{closure\}\}$"),
    ],
    "blocking": [
        ("execute the command (commands::execute)", r"^mongolock_testkit::commands::execute$"),
        ("parse the update pipeline into expressions (engine::expr::Scope::parse)", r"^mongolock_testkit::engine::expr::Scope::parse$"),
        ("evaluate it (engine::expr::Env::eval)", r"^mongolock_testkit::engine::expr::Env::eval$"),
        ("drop the parsed pipeline (drop_in_place<engine::expr::Node>)", r"^core::ptr::drop_in_place<mongolock_testkit::engine::expr::Node>$"),
    ],
}


def kind_of(trigger):
    for k in ("acquire_once", "release_once", "idle_once", "server_mark", "blocking_mark"):
        if trigger.endswith(k):
            return k
    return None


def load(directory, lib):
    """{thread role: [profile in order]} for one library."""
    pattern = re.compile(re.escape(lib) + r"\.out\.(\d+)-(\d+)$")
    found = []
    for entry in os.listdir(directory):
        m = pattern.match(entry)
        if m:
            found.append((int(m.group(1)), int(m.group(2)), entry))
    roles = {"client": [], "server": [], "blocking": []}
    for dump, thread, entry in sorted(found):
        total, costs, allocs, trigger, inclusive = parse(os.path.join(directory, entry))
        k = kind_of(trigger)
        if k in ("acquire_once", "release_once", "idle_once"):
            role = "client"
        elif k == "server_mark":
            role = "server"
        elif k == "blocking_mark":
            role = "blocking"
        else:
            continue
        picked = {}
        for label, pattern in FUNCTIONS[role]:
            if pattern:
                picked[label] = sum(v for f, v in inclusive.items() if re.search(pattern, f))
        roles[role].append((k, total, costs, allocs, picked))
    return roles


def breakdown(directory, warm, pairs, lib):
    roles = load(directory, lib)
    calls = roles["client"]
    kinds = [k for k, *_ in calls]
    start = 3 * warm
    end = start + 3 * pairs
    if len(calls) < end:
        sys.exit(f"{lib}: {len(calls)} client profiles, expected at least {end}")
    for role in ("server", "blocking"):
        if len(roles[role]) < end:
            sys.exit(f"{lib}: {len(roles[role])} {role} marks, expected at least {end}")
    # Profiles per pair: [(acquire, release, idle)] for each role.
    per_pair = {role: [roles[role][i:i + 3] for i in range(start, end, 3)]
                for role in roles}
    for i in range(start, end, 3):
        assert kinds[i:i + 3] == ["acquire_once", "release_once", "idle_once"], kinds[i:i + 3]
    # Pairs with a background event left out.
    keep = []
    for p in range(pairs):
        ok = True
        for role in roles:
            for j in range(3):
                med = statistics.median(per_pair[role][q][j][1] for q in range(pairs))
                if med and abs(per_pair[role][p][j][1] - med) > 0.05 * med + 20_000:
                    ok = False
        if ok:
            keep.append(p)
    if not keep:
        sys.exit(f"{lib}: every pair had a background event")
    result = {}
    for role in roles:
        mean_total = [statistics.fmean(per_pair[role][p][j][1] for p in keep) for j in range(3)]
        mean_allocs = [statistics.fmean(per_pair[role][p][j][3] for p in keep) for j in range(3)]
        functions = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
        for p in keep:
            for j in range(3):
                for label, v in per_pair[role][p][j][4].items():
                    functions[label][j] += v / len(keep)
        groups = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
        for p in keep:
            for j in range(3):
                for g, v in per_pair[role][p][j][2].items():
                    groups[g][j] += v / len(keep)
        result[role] = {
            "acquire": mean_total[0] - mean_total[2],
            "release": mean_total[1] - mean_total[2],
            "idle": mean_total[2],
            "alloc_acquire": mean_allocs[0] - mean_allocs[2],
            "alloc_release": mean_allocs[1] - mean_allocs[2],
            "groups": {g: (v[0] - v[2], v[1] - v[2]) for g, v in groups.items()},
            "functions": {g: (v[0] - v[2], v[1] - v[2]) for g, v in functions.items()},
        }
    return result, len(keep)


def fmt(x):
    return f"{x:,.0f}"


def main():
    directory, warm, pairs, libs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    results = {}
    for lib in libs:
        results[lib] = breakdown(directory, warm, pairs, lib)
    roles = (("client", "client (library + driver)"),
             ("server", "server: runtime thread (wire, decode, dispatch, encode)"),
             ("blocking", "server: blocking pool (command execution)"))
    print("### Instructions per call, by thread\n")
    print("| library | pairs kept | call | " + " | ".join(r[1] for r in roles) + " | server, both threads | client heap allocations |")
    print("|---|---|---|" + "---|" * (len(roles) + 2))
    for lib, (res, kept) in results.items():
        for call in ("acquire", "release"):
            row = [fmt(res[r][call]) for r, _ in roles]
            server = res["server"][call] + res["blocking"][call]
            print(f"| {lib} | {kept} | {call} | " + " | ".join(row) +
                  f" | {fmt(server)} | {res['client']['alloc_' + call]:,.0f} |")
        row = [fmt(res[r]["acquire"] + res[r]["release"]) for r, _ in roles]
        server = sum(res[r][c] for r in ("server", "blocking") for c in ("acquire", "release"))
        allocs = res["client"]["alloc_acquire"] + res["client"]["alloc_release"]
        print(f"| {lib} | {kept} | **pair** | " + " | ".join(row) + f" | {fmt(server)} | {allocs:,.0f} |")
    print()
    print("Idle call (the marks and the background, subtracted above): " + "; ".join(
        f"{lib} " + ", ".join(f"{r} {fmt(res[r]['idle'])}" for r, _ in roles)
        for lib, (res, _) in results.items()))
    for lib, (res, _) in results.items():
        for role, title in roles:
            groups = res[role]["groups"]
            rows = sorted(groups.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))
            total_a, total_r = res[role]["acquire"], res[role]["release"]
            print(f"\n### {lib}, {title}: where the instructions run\n")
            print("| code | acquire | release | pair | share of the pair |")
            print("|---|---|---|---|---|")
            shown = 0.0
            for g, (a, r) in rows[:16]:
                if a + r < 0.005 * (total_a + total_r):
                    break
                shown += a + r
                print(f"| {g} | {fmt(a)} | {fmt(r)} | {fmt(a + r)} | {100 * (a + r) / (total_a + total_r):.1f}% |")
            for prefix in ("mongolock: ", "mongolock-testkit: "):
                own = [(g, v) for g, v in rows if g.startswith(prefix) and (v[0] + v[1]) > 0]
                if own and (role == "client") == (prefix == "mongolock: "):
                    a = sum(v[0] for _, v in own)
                    r = sum(v[1] for _, v in own)
                    top = ", ".join(f"{g[len(prefix):]} {fmt(v[0] + v[1])}" for g, v in own[:6])
                    print(f"| (of which, across rows: {prefix[:-2]}'s own code, every file: {top}, ...) | {fmt(a)} | {fmt(r)} | {fmt(a + r)} | {100 * (a + r) / (total_a + total_r):.1f}% |")
            rest = total_a + total_r - shown
            print(f"| everything else | | | {fmt(rest)} | {100 * rest / (total_a + total_r):.1f}% |")
            print(f"| **total** | {fmt(total_a)} | {fmt(total_r)} | {fmt(total_a + total_r)} | 100% |")
            functions = res[role]["functions"]
            if role == "client" and functions:
                w = "mongolock: Context::write_repeating (the library's whole write, driver included)"
                d = "driver: run_command (encode, send, receive, decode the reply)"
                functions["mongolock + driver: write_repeating outside the driver's future (the clone of the command for the try, the builder, the rest)"] = (
                    functions[w][0] - functions[d][0], functions[w][1] - functions[d][1])
            print(f"\n{lib}, {title}: inclusive cost of some functions (each with all it calls; rows overlap)\n")
            print("| function | acquire | release | pair | share of the pair |")
            print("|---|---|---|---|---|")
            for label, _ in FUNCTIONS[role]:
                a, r = functions.get(label, (0.0, 0.0))
                if a + r == 0:
                    continue
                print(f"| {label} | {fmt(a)} | {fmt(r)} | {fmt(a + r)} | {100 * (a + r) / (total_a + total_r):.1f}% |")


if __name__ == "__main__":
    main()
