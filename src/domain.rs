//! Small vocabulary shared by every layer: serving roles, signal names, the one shape of a
//! user-facing error ([`Diagnostic`]) and the one "did you mean" rule ([`suggest`]).
//!
//! A leaf: it imports nothing from mcsup, so the recipe parser, the planner and the supervisor can
//! all use these types without depending on each other.

pub mod python;
pub mod signature;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The coordinator's control listener: on `address` (the one every node dials), else on every
/// interface when that address is not one of this node's (a name that resolves elsewhere); a
/// port taken there is an error, never a fallback. The preflight binds the same way.
pub fn bind_control_port(address: &str, port: u16) -> std::io::Result<std::net::TcpListener> {
    std::net::TcpListener::bind((address, port)).or_else(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => Err(e),
        _ => std::net::TcpListener::bind(("0.0.0.0", port)),
    })
}

/// Whether someone but this user could write the file or directory `m` describes: its mode lets
/// others write, or a group that is not the user's own (see [`group_is_private`]).
pub fn writable_by_others(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    m.mode() & 0o002 != 0 || (m.mode() & 0o020 != 0 && !group_is_private(m.gid()))
}

/// Whether group `gid` is this user's own (a user private group: named as the user, no other
/// member), so that its write bit lets nobody else write.
pub fn group_is_private(gid: u32) -> bool {
    let Ok(Some(me)) = nix::unistd::User::from_uid(nix::unistd::geteuid()) else {
        return false;
    };
    match nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid)) {
        Ok(Some(g)) => g.name == me.name && g.mem.iter().all(|m| *m == me.name),
        _ => false,
    }
}

/// The value of flag `--name` in an argv (`--name=V` or `--name V`), the first one given.
pub fn flag_value<'a>(argv: &'a [String], name: &str) -> Option<&'a str> {
    argv.iter().enumerate().find_map(|(i, a)| {
        let rest = a.strip_prefix("--")?.strip_prefix(name)?;
        match rest.strip_prefix('=') {
            Some(v) => Some(v),
            None if rest.is_empty() => argv.get(i + 1).map(String::as_str),
            None => None,
        }
    })
}

/// The stop requests of the signals module table (`supervisor/signals.rs`): each starts the ordered
/// teardown, as SIGTERM does. The drain signal is listened for as well, whatever it is (by
/// default SIGUSR1, which is here too). The machine holds back a child's death by one of them
/// (`SIGNAL_DEATH_SETTLE`).
pub const STOP_SIGNALS: [nix::sys::signal::Signal; 14] = [
    nix::sys::signal::Signal::SIGTERM,
    nix::sys::signal::Signal::SIGINT,
    nix::sys::signal::Signal::SIGHUP,
    nix::sys::signal::Signal::SIGQUIT,
    nix::sys::signal::Signal::SIGUSR1,
    nix::sys::signal::Signal::SIGUSR2,
    nix::sys::signal::Signal::SIGALRM,
    nix::sys::signal::Signal::SIGVTALRM,
    nix::sys::signal::Signal::SIGPROF,
    nix::sys::signal::Signal::SIGPWR,
    nix::sys::signal::Signal::SIGXCPU,
    nix::sys::signal::Signal::SIGIO,
    nix::sys::signal::Signal::SIGSTKFLT,
    nix::sys::signal::Signal::SIGSYS,
];

/// Whether `signo` is one of [`STOP_SIGNALS`]: a child killed by one while nobody asked it to
/// stop may have been hit by the same step-wide signal that is on its way to mcsup.
pub fn is_stop_signal(signo: i32) -> bool {
    STOP_SIGNALS.iter().any(|&s| s as i32 == signo)
}

/// [`STOP_SIGNALS`] as a signal set (to block or unblock them).
pub fn stop_set() -> nix::sys::signal::SigSet {
    let mut set = nix::sys::signal::SigSet::empty();
    for s in STOP_SIGNALS {
        set.add(s);
    }
    set
}

/// The stop signal waiting to be delivered to this thread or the process (held while a
/// preflight helper runs, or through `mcsup run`'s preflight), if any.
pub fn stop_pending() -> Option<nix::sys::signal::Signal> {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigpending fills the set it is given; it is read only when that succeeded.
    unsafe {
        if libc::sigpending(set.as_mut_ptr()) != 0 {
            return None;
        }
        let set = set.assume_init();
        STOP_SIGNALS
            .iter()
            .copied()
            .find(|s| libc::sigismember(&set, *s as libc::c_int) == 1)
    }
}

/// Whether a process (worker, service) name is usable: letters, digits, `-` and `_`. It names
/// the process's log, `<log_dir>/<node>.<process>.log`; a `.` would let two nodes' files be one
/// (`n1` + `a.w` and `n1.a` + `w`).
pub fn plain_process_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_PROCESS_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The longest worker or service name: its processes' names (the name and an instance number)
/// must fit the log directory's 100 bytes a name.
pub const MAX_PROCESS_NAME: usize = 90;

/// The fix for a name [`plain_process_name`] refuses.
pub const PROCESS_NAME_FIX: &str =
    "use at most 90 letters, digits, '-' or '_' (it names log files <node>.<name>.log, where a '.' could make two nodes' files one)";

/// Serde helper: a [`std::time::Duration`] as integer milliseconds.
pub mod duration_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

/// GPU indices as srtctl and CUDA write them: `0,1,2`.
pub fn gpu_list(gpus: &[u32]) -> String {
    gpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// A duration for a message: `5 s`, `2.5 s`.
pub fn show_secs(d: std::time::Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// A serving role, as named by srt-slurm (`prefill`, `decode`, `aggregated`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Prefill,
    Decode,
    #[serde(alias = "agg")]
    Aggregated,
}

impl Role {
    /// All roles, in srt-slurm's order.
    pub const ALL: [Role; 3] = [Role::Prefill, Role::Decode, Role::Aggregated];

    /// The canonical lower-case name (`aggregated`, not `agg`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Prefill => "prefill",
            Role::Decode => "decode",
            Role::Aggregated => "aggregated",
        }
    }

    /// Roles as a plan names them: `prefill,decode`, or `none` (a node without workers).
    pub fn list(roles: &[Role]) -> String {
        match roles {
            [] => "none".to_string(),
            _ => roles
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    /// The name srtctl gives the mode and srt-slurm 2.0 the role (`roles.agg`, `agg_0`,
    /// `sglang-agg-0`): `agg` for the aggregated role.
    pub fn short(self) -> &'static str {
        match self {
            Role::Aggregated => "agg",
            r => r.as_str(),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "prefill" => Ok(Role::Prefill),
            "decode" => Ok(Role::Decode),
            "agg" | "aggregated" => Ok(Role::Aggregated),
            other => Err(format!(
                "unknown role `{other}` (expected prefill, decode, agg/aggregated, or a comma list of them)"
            )),
        }
    }
}

/// A POSIX signal by name (`SIGINT`), serialised as its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SignalName(pub nix::sys::signal::Signal);

impl SignalName {
    pub const SIGTERM: SignalName = SignalName(nix::sys::signal::Signal::SIGTERM);
    pub const SIGINT: SignalName = SignalName(nix::sys::signal::Signal::SIGINT);
    pub const SIGKILL: SignalName = SignalName(nix::sys::signal::Signal::SIGKILL);
    pub const SIGUSR1: SignalName = SignalName(nix::sys::signal::Signal::SIGUSR1);

    pub fn as_str(self) -> &'static str {
        self.0.as_str()
    }

    /// The signal number.
    pub fn number(self) -> i32 {
        self.0 as i32
    }
}

impl fmt::Display for SignalName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SignalName {
    type Err = String;
    /// Accepts `SIGTERM`, `TERM`, `term`, or a number (`15`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if let Ok(n) = t.parse::<i32>() {
            return nix::sys::signal::Signal::try_from(n)
                .map(SignalName)
                .map_err(|_| format!("`{t}` is not a signal number"));
        }
        let upper = t.to_ascii_uppercase();
        let full = if upper.starts_with("SIG") {
            upper
        } else {
            format!("SIG{upper}")
        };
        nix::sys::signal::Signal::from_str(&full)
            .map(SignalName)
            .map_err(|_| {
                format!("`{t}` is not a signal name (expected e.g. SIGTERM, SIGINT, SIGUSR1)")
            })
    }
}

impl Serialize for SignalName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SignalName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The candidate closest to `input` (case-insensitive Damerau-Levenshtein distance), if it is a
/// plausible typo: at most 3 edits, and fewer edits than the candidate has characters. The one
/// "did you mean" rule of every error and warning.
pub fn suggest<'a>(input: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    suggest_within(input, candidates, |d, len| d <= 3 && d < len)
}

/// [`suggest`] for names that are tolerated when unknown (a recipe's foreign sections): only a
/// near miss counts as a typo, at most 2 edits and fewer than half the candidate's length.
pub fn suggest_typo<'a>(
    input: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    suggest_within(input, candidates, |d, len| d <= 2 && d < len / 2 + 1)
}

fn suggest_within<'a>(
    input: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    plausible: impl Fn(usize, usize) -> bool,
) -> Option<&'a str> {
    let input = input.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| {
            (
                strsim::damerau_levenshtein(&input, &c.to_ascii_lowercase()),
                c,
            )
        })
        .filter(|&(d, c)| plausible(d, c.chars().count()))
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod suggest_tests {
    use super::*;

    #[test]
    fn near_misses_are_suggested_and_far_ones_are_not() {
        let keys = ["backend", "mcsup", "services", "env"];
        assert_eq!(suggest("bakend", keys), Some("backend"));
        assert_eq!(suggest("BACKEND", keys), Some("backend"));
        assert_eq!(suggest("servces", keys), Some("services"));
        assert_eq!(suggest("frontend", keys), None);
        // Fewer edits than the candidate is long: "x" is not a typo of "env".
        assert_eq!(suggest("xyz", keys), None);
        assert_eq!(suggest_typo("bakend", keys), Some("backend"));
        assert_eq!(suggest_typo("backnd_x", keys), None);
        assert_eq!(suggest_typo("enx", keys), Some("env"));
        assert_eq!(suggest_typo("exx", keys), None);
    }
}

/// A user-facing error about a place in an input: the file, the key path, the position, what is
/// wrong and how to fix it. The one rendering of "message + fix" for recipe and plan errors:
/// `FILE[:LINE:COL]: [KEY.PATH: ]MESSAGE` and, on the next line, `  fix: FIX`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostic {
    /// The input file, when the error is about one.
    pub file: Option<std::path::PathBuf>,
    /// Dotted key path, e.g. `backend.mooncake_kv_store.standalone.placements` (or a CLI flag
    /// such as `--role`); empty when the error is about the whole input.
    pub key_path: String,
    /// 1-based line and column, when known.
    pub position: Option<(usize, usize)>,
    pub message: String,
    pub fix: Option<String>,
}

impl Diagnostic {
    /// About a key (or an option) of no particular file yet: what is wrong and the fix.
    pub fn new(
        key_path: impl Into<String>,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Diagnostic {
            key_path: key_path.into(),
            message: message.into(),
            fix: Some(fix.into()),
            ..Default::default()
        }
    }

    /// The same diagnostic, placed in `file` (at `position`, when known).
    pub fn in_file(mut self, file: &std::path::Path, position: Option<(usize, usize)>) -> Self {
        self.file = Some(file.to_path_buf());
        self.position = position.or(self.position);
        self
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut lead = match &self.file {
            Some(file) => file.display().to_string(),
            None => String::new(),
        };
        if let (Some((l, c)), false) = (self.position, lead.is_empty()) {
            lead.push_str(&format!(":{l}:{c}"));
        }
        for part in [lead.as_str(), self.key_path.as_str()] {
            if !part.is_empty() {
                write!(f, "{part}: ")?;
            }
        }
        write!(f, "{}", self.message)?;
        if let Some(fix) = &self.fix {
            write!(f, "\n  fix: {fix}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod diagnostic_tests {
    use super::*;

    #[test]
    fn a_diagnostic_names_the_place_the_problem_and_the_fix() {
        let d = Diagnostic {
            key_path: "mcsup.shutdown.deadline_seconds".into(),
            message: "must be positive".into(),
            fix: Some("set 25".into()),
            ..Default::default()
        };
        assert_eq!(
            d.to_string(),
            "mcsup.shutdown.deadline_seconds: must be positive\n  fix: set 25"
        );
        let d = d.in_file(std::path::Path::new("job.yaml"), Some((3, 5)));
        assert_eq!(
            d.to_string(),
            "job.yaml:3:5: mcsup.shutdown.deadline_seconds: must be positive\n  fix: set 25"
        );
        let whole = Diagnostic {
            file: Some("job.yaml".into()),
            message: "the recipe is empty".into(),
            ..Default::default()
        };
        assert_eq!(whole.to_string(), "job.yaml: the recipe is empty");
    }
}

// ---------------------------------------------------------------------------------------------
// The error of planning (here, below both the planner and the engines, which both raise it)
// ---------------------------------------------------------------------------------------------

/// A recipe that is syntactically fine but cannot be planned for this node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PlanError {
    /// Dotted key path in the recipe (or a CLI flag such as `--role`).
    pub key_path: String,
    pub message: String,
    pub fix: String,
    /// The error is the key's value (an unknown name): placed at the value, not the key.
    pub at_value: bool,
}

impl PlanError {
    /// Placed at the key's value rather than the key.
    pub fn at_value(mut self) -> Self {
        self.at_value = true;
        self
    }

    /// As a [`Diagnostic`], to be placed in the recipe's file by the caller.
    pub fn diagnostic(&self) -> Diagnostic {
        Diagnostic::new(&self.key_path, &self.message, &self.fix)
    }
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.diagnostic().fmt(f)
    }
}

pub(crate) fn plan_err(
    key_path: impl Into<String>,
    message: impl Into<String>,
    fix: impl Into<String>,
) -> PlanError {
    PlanError {
        key_path: key_path.into(),
        message: message.into(),
        fix: fix.into(),
        at_value: false,
    }
}
