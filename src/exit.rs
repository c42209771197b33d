//! mcsup's exit codes: one type for every command, and the meaning of each, as the table in
//! docs/supervision.md states it (`tests/docs.rs` checks the page against [`ExitCode::TABLE`]).

/// How mcsup ends. `code()` is the process exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// Success; for `run`, a requested shutdown with every process stopped cleanly.
    Ok,
    /// A preflight check failed (`preflight`, or `run` refusing to start); `status` found no
    /// status file.
    PreflightFailed,
    /// Bad usage, an unreadable or invalid recipe, or a plan that cannot be made for this node.
    Usage,
    /// The supervisor could not set up (log directory, a plan it cannot run, the runtime).
    SetupFailed,
    /// A long-running critical process exited with a success code nobody asked for.
    CriticalExitedZero,
    /// A critical process (or a gate/dependency it needs) never became ready.
    ReadinessFailed,
    /// A critical process kept failing its liveness probe until its restart limit.
    LivenessFailed,
    /// A critical process could not be spawned (fork/exec error, e.g. no such program).
    SpawnFailed,
    /// The node finished on its own (workers done / nothing left) but some process had failed.
    FinishedWithFailures,
    /// The benchmark exited 0 but its result files say it measured nothing (no request
    /// completed, no token generated, too many requests failed).
    BenchmarkInvalid,
    /// A requested shutdown whose teardown needed SIGKILL (a grace or the global deadline
    /// expired, or a second SIGINT/SIGTERM forced it). A failure code wins over this one.
    TeardownNeededSigkill,
    /// The failing critical process's own exit code N, or 128 + S when signal S killed it; the
    /// benchmark's exit status N.
    Child(i32),
}

impl ExitCode {
    /// Every fixed code with its meaning, in the order of docs/supervision.md's table (which also has a
    /// row for [`ExitCode::Child`]: "N, 128+S").
    pub const TABLE: [(ExitCode, &'static str); 11] = [
        (ExitCode::Ok, "success; for `run`: a requested shutdown (signal, drain, all workers done) with every process stopped cleanly"),
        (ExitCode::PreflightFailed, "preflight failed (`preflight`, or `run` refusing to start); `status` found no status file"),
        (ExitCode::Usage, "usage error, unreadable or invalid recipe, or a plan that cannot be made for this node"),
        (ExitCode::SetupFailed, "the supervisor could not start (e.g. the log directory cannot be created, a dependency cycle in a hand-written plan)"),
        (ExitCode::CriticalExitedZero, "`run`: a critical long-running process exited 0 when nobody asked it to"),
        (ExitCode::ReadinessFailed, "`run`: a critical process never became ready (readiness timeout, or a gate/dependency it needs failed)"),
        (ExitCode::LivenessFailed, "`run`: a critical process kept failing its liveness probe until its restart limit; or the job's endpoint failed its canary with `mcsup.canary.on_failure: drain`"),
        (ExitCode::SpawnFailed, "`run`: a critical process could not be spawned (e.g. program not found)"),
        (ExitCode::FinishedWithFailures, "`run`: the node finished on its own (all workers done) but a non-critical process had failed"),
        (ExitCode::BenchmarkInvalid, "`run`: the benchmark exited 0 but its results measured nothing (`benchmark-invalid`: no completed request, no generated token, or more failed requests than `benchmark.max_failed_requests`)"),
        (ExitCode::TeardownNeededSigkill, "`run`: the teardown needed SIGKILL (a grace or the global deadline expired, or a second SIGINT/SIGTERM)"),
    ];

    /// The meaning of [`ExitCode::Child`] in docs/supervision.md's table.
    pub const CHILD_MEANING: &'static str =
        "`run`: the failing critical process's own exit code N, or 128 + S when signal S killed it; the benchmark's exit status N";

    /// The process exit status.
    pub const fn code(self) -> i32 {
        match self {
            ExitCode::Ok => 0,
            ExitCode::PreflightFailed => 1,
            ExitCode::Usage => 2,
            ExitCode::SetupFailed => 3,
            ExitCode::CriticalExitedZero => 4,
            ExitCode::ReadinessFailed => 5,
            ExitCode::LivenessFailed => 6,
            ExitCode::SpawnFailed => 7,
            ExitCode::FinishedWithFailures => 8,
            ExitCode::BenchmarkInvalid => 9,
            ExitCode::TeardownNeededSigkill => 124,
            ExitCode::Child(n) => n,
        }
    }
}

impl From<ExitCode> for i32 {
    fn from(c: ExitCode) -> i32 {
        c.code()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_codes_are_distinct_and_in_table_order() {
        let codes: Vec<i32> = ExitCode::TABLE.iter().map(|(c, _)| c.code()).collect();
        let mut sorted = codes.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(codes, sorted);
        assert_eq!(ExitCode::Child(143).code(), 143);
    }
}
