//! Small vocabulary shared by every layer: serving roles, signal names, and the one "did you
//! mean" rule every error message uses ([`suggest`]).
//!
//! A leaf: it imports nothing from mcsup, so the recipe parser, the planner and the supervisor can
//! all use these types without depending on each other.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

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
