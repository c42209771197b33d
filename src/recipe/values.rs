//! Small validated value types used by the recipe: their `Deserialize` impls reject bad values
//! while the YAML position is still known, so errors carry a line and column.
//!
//! A custom error message may carry its fix after [`FIX_MARKER`]; the loader splits it off.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::mooncake::size;

// The file readers and their bounds live in `load`; re-exported here because `recipe` exports
// everything public in this module (`pub use values::*`), so `run --plan-file` reads its file
// with the same bounded reader as a recipe.
pub use super::load::{
    read_input_file, InputFile, InputFileError, MAX_RECIPE_BYTES, MAX_YAML_DEPTH,
};

/// Separates "what is wrong" from "how to fix it" inside a serde custom error message.
pub const FIX_MARKER: &str = " @@fix: ";

/// Starts a custom error message that names the key inside the value being read (`http.path`,
/// `MC_GID_INDEX`, `[1]`): the loader appends it to the key path and points at that key's line,
/// not at the start of the enclosing block where the parser stands when the error is raised.
pub const AT_MARKER: &str = "@@at:";
const AT_END: &str = " @@ ";

fn with_fix(msg: impl fmt::Display, fix: impl fmt::Display) -> String {
    format!("{msg}{FIX_MARKER}{fix}")
}

/// `with_fix` for the key `sub` inside the current value.
pub fn at_key(sub: impl fmt::Display, msg: impl fmt::Display, fix: impl fmt::Display) -> String {
    format!("{AT_MARKER}{sub}{AT_END}{msg}{FIX_MARKER}{fix}")
}

/// Split an [`at_key`] message into (sub-key, rest).
pub fn split_at_key(msg: &str) -> (Option<&str>, &str) {
    match msg
        .strip_prefix(AT_MARKER)
        .and_then(|r| r.split_once(AT_END))
    {
        Some((sub, rest)) => (Some(sub), rest),
        None => (None, msg),
    }
}

/// Variables whose values Mooncake parses as sizes: validated at load time.
pub const SIZE_VARIABLES: [&str; 2] =
    ["MOONCAKE_GLOBAL_SEGMENT_SIZE", "MOONCAKE_LOCAL_BUFFER_SIZE"];

/// Most variables one environment block may set. Real blocks set a few dozen, and the kernel
/// caps a process's whole environment at a few MiB; the plan merges blocks variable by variable,
/// so 178 000 variables (a 4 MiB block) took minutes to plan.
pub const MAX_ENV_VARS: usize = 1024;

/// An environment block: variable name → string value, in file order.
///
/// Values must be YAML strings (as srt-slurm requires): `MC_GID_INDEX: 3` is an error with the
/// fix `MC_GID_INDEX: "3"`. Size variables must parse as Mooncake sizes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EnvMap(pub Vec<(String, String)>);

impl EnvMap {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A name `execve` passes through unchanged and shells can use: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// Describe a YAML scalar the user wrote, for "quote it" fixes.
fn scalar_text(v: &serde_yaml::Value) -> Option<String> {
    match v {
        serde_yaml::Value::Bool(b) => Some(b.to_string()),
        serde_yaml::Value::Number(n) => Some(n.to_string()),
        serde_yaml::Value::Null => Some(String::new()),
        _ => None,
    }
}

fn kind_of(v: &serde_yaml::Value) -> &'static str {
    match v {
        serde_yaml::Value::Null => "null",
        serde_yaml::Value::Bool(_) => "a boolean",
        serde_yaml::Value::Number(_) => "a number",
        serde_yaml::Value::String(_) => "a string",
        serde_yaml::Value::Sequence(_) => "a list",
        serde_yaml::Value::Mapping(_) => "a mapping",
        serde_yaml::Value::Tagged(_) => "a tagged value",
    }
}

impl<'de> Deserialize<'de> for EnvMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = EnvMap;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping of variable names to string values")
            }
            fn visit_unit<E: de::Error>(self) -> Result<EnvMap, E> {
                Ok(EnvMap::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<EnvMap, A::Error> {
                let mut out: Vec<(String, String)> = Vec::new();
                // Names seen so far: a linear search made a 4 MiB block take minutes.
                let mut seen = std::collections::HashSet::new();
                while let Some(key) = map.next_key::<serde_yaml::Value>()? {
                    let name = match &key {
                        serde_yaml::Value::String(s) => s.clone(),
                        other => {
                            return Err(de::Error::custom(with_fix(
                                format!(
                                    "an environment variable name must be a string, found {}",
                                    kind_of(other)
                                ),
                                "write the name as a plain word, e.g. MOONCAKE_PROTOCOL",
                            )))
                        }
                    };
                    if !valid_env_name(&name) {
                        return Err(de::Error::custom(at_key(
                            &name,
                            format!("`{name}` is not a valid environment variable name"),
                            "use letters, digits and underscores, not starting with a digit",
                        )));
                    }
                    let value: serde_yaml::Value = map.next_value()?;
                    let value = match value {
                        serde_yaml::Value::String(s) => s,
                        other => {
                            let fix = match scalar_text(&other) {
                                Some(t) => format!("quote it: {name}: \"{t}\""),
                                None => format!("give `{name}` a single string value"),
                            };
                            return Err(de::Error::custom(at_key(
                                &name,
                                format!(
                                    "the value of `{name}` must be a string, found {}",
                                    kind_of(&other)
                                ),
                                fix,
                            )));
                        }
                    };
                    if SIZE_VARIABLES.contains(&name.as_str()) && !value.contains('{') {
                        if let Err(e) = size::parse_mooncake_size(&value) {
                            return Err(de::Error::custom(at_key(
                                &name,
                                format!("`{name}: \"{value}\"` is not a size Mooncake accepts: {e}"),
                                "write a number with an optional unit kb/mb/gb/tb (powers of 1024), e.g. \"100gb\" or \"512mb\"; GiB-style units are rejected by Mooncake",
                            )));
                        }
                    }
                    if out.len() == MAX_ENV_VARS {
                        return Err(de::Error::custom(at_key(
                            &name,
                            format!("more than {MAX_ENV_VARS} variables in one block"),
                            "set only what the processes need (the environment they inherit is passed on anyway)",
                        )));
                    }
                    if !seen.insert(name.clone()) {
                        return Err(de::Error::custom(with_fix(
                            format!("`{name}` is set twice in the same block"),
                            "keep one of the two lines",
                        )));
                    }
                    out.push((name, value));
                }
                Ok(EnvMap(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// A list of command-line words. Every item must be a YAML string (quote numbers: `"8800"`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Words(pub Vec<String>);

impl<'de> Deserialize<'de> for Words {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Words;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of strings")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Words, E> {
                Ok(Words::default())
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Words, E> {
                Err(E::custom(with_fix(
                    format!("expected a list of strings, found the single string `{v}`"),
                    format!(
                        "write it as a list: [{}]",
                        v.split_whitespace()
                            .map(|w| format!("\"{w}\""))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Words, A::Error> {
                let mut out = Vec::new();
                while let Some(item) = seq.next_element::<serde_yaml::Value>()? {
                    match item {
                        serde_yaml::Value::String(s) => out.push(s),
                        other => {
                            let fix = match scalar_text(&other) {
                                Some(t) => format!("quote it: \"{t}\""),
                                None => "each item must be one string".to_string(),
                            };
                            return Err(de::Error::custom(at_key(
                                format!("[{}]", out.len()),
                                format!(
                                    "item {} must be a string, found {}",
                                    out.len(),
                                    kind_of(&other)
                                ),
                                fix,
                            )));
                        }
                    }
                }
                Ok(Words(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// A command: a non-empty [`Words`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Command(pub Vec<String>);

impl<'de> Deserialize<'de> for Command {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = Words::deserialize(d)?;
        if w.0.is_empty() || w.0[0].trim().is_empty() {
            return Err(de::Error::custom(with_fix(
                "the command is empty",
                "give the program and its arguments as a list, e.g. [python, -m, mooncake.mooncake_store_service]",
            )));
        }
        Ok(Command(w.0))
    }
}

/// A TCP port, 1..=65535.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Port(pub u16);

impl<'de> Deserialize<'de> for Port {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_yaml::Value::deserialize(d)?;
        let n = match &v {
            serde_yaml::Value::Number(n) => n.as_i64(),
            serde_yaml::Value::String(s) => s.trim().parse::<i64>().ok(),
            _ => None,
        };
        match n {
            Some(n) if (1..=65535).contains(&n) => Ok(Port(n as u16)),
            Some(n) => Err(de::Error::custom(with_fix(
                format!("port {n} is out of range"),
                "use a TCP port from 1 to 65535",
            ))),
            None => Err(de::Error::custom(with_fix(
                format!("expected a port number, found {}", kind_of(&v)),
                "use a TCP port from 1 to 65535, e.g. 8800",
            ))),
        }
    }
}

/// A non-negative duration in seconds (fractions allowed). `positive` variants reject 0.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Seconds(pub f64);

impl Seconds {
    pub fn duration(self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.0)
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_yaml::Value::deserialize(d)?;
        let n = match &v {
            serde_yaml::Value::Number(n) => n.as_f64(),
            _ => None,
        };
        match n {
            Some(n) if (0.0..=31_536_000.0).contains(&n) => Ok(Seconds(n)),
            Some(n) if n < 0.0 => Err(de::Error::custom(with_fix(
                format!("{n} seconds is negative"),
                "use a number of seconds of 0 or more",
            ))),
            Some(n) => Err(de::Error::custom(with_fix(
                format!("{n} seconds is out of range"),
                "use a number of seconds up to one year (31536000)",
            ))),
            None => Err(de::Error::custom(with_fix(
                format!("expected a number of seconds, found {}", kind_of(&v)),
                "write a plain number, e.g. 120 (not \"120s\")",
            ))),
        }
    }
}

/// Like [`Seconds`] but at least a millisecond (a probe interval or liveness period of a
/// nanosecond would be a busy loop).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PositiveSeconds(pub f64);

impl PositiveSeconds {
    pub fn duration(self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.0)
    }
}

impl<'de> Deserialize<'de> for PositiveSeconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Seconds::deserialize(d)?;
        if s.0 <= 0.0 {
            return Err(de::Error::custom(with_fix(
                "a duration of 0 seconds is not allowed here",
                "use a number greater than 0 (0.001, a millisecond, at least)",
            )));
        }
        if s.0 < 0.001 {
            return Err(de::Error::custom(with_fix(
                format!("a duration of {} seconds is too short here", s.0),
                "use 0.001 (a millisecond) or more",
            )));
        }
        Ok(PositiveSeconds(s.0))
    }
}

/// A signal name such as `SIGINT` (or `INT`, or a number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SignalValue(pub crate::domain::SignalName);

impl<'de> Deserialize<'de> for SignalValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_yaml::Value::deserialize(d)?;
        let text = match &v {
            serde_yaml::Value::String(s) => s.clone(),
            serde_yaml::Value::Number(n) => n.to_string(),
            other => {
                return Err(de::Error::custom(with_fix(
                    format!("expected a signal name, found {}", kind_of(other)),
                    "write e.g. SIGTERM, SIGINT or SIGUSR1",
                )))
            }
        };
        let sig: crate::domain::SignalName = text.parse().map_err(|e: String| {
            de::Error::custom(with_fix(e, "write e.g. SIGTERM, SIGINT or SIGUSR1"))
        })?;
        if let Some(why) = unusable_signal(sig) {
            return Err(de::Error::custom(with_fix(
                format!("{sig} cannot be used here: {why}"),
                SIGNAL_FIX,
            )));
        }
        Ok(SignalValue(sig))
    }
}

/// The fix for a signal [`unusable_signal`] refuses.
pub const SIGNAL_FIX: &str =
    "stop processes with SIGTERM or SIGINT (or SIGQUIT, SIGHUP); drain the node with SIGUSR1 or SIGUSR2";

/// Why `sig` can neither stop a process (a stop signal) nor mean "drain" to mcsup (the drain
/// signal), or `None` when it can do both.
///
/// A stop signal must end a process that does not handle it, so its default action must be to
/// terminate; a drain signal must come only from whoever means it, so nothing the kernel, the
/// terminal or job control sends on its own (a SIGCHLD drain signal drained the node 10 ms after
/// start, when the first child exited).
pub fn unusable_signal(sig: crate::domain::SignalName) -> Option<&'static str> {
    use nix::sys::signal::Signal::*;
    Some(match sig.0 {
        SIGKILL | SIGSTOP => "it cannot be caught or ignored, so mcsup could not handle it or forward it gracefully",
        SIGCHLD | SIGWINCH | SIGURG => {
            "its default action is to do nothing, so a process that does not handle it ignores it; and the system sends it on its own (a child exiting, a terminal resize, urgent socket data)"
        }
        SIGTSTP | SIGTTIN | SIGTTOU | SIGCONT => {
            "it suspends or resumes a process instead of ending it, and job control sends it on its own"
        }
        SIGSEGV | SIGBUS | SIGFPE | SIGILL | SIGTRAP | SIGSYS | SIGABRT => {
            "it reports a crash: the kernel sends it on a fault, and the process that gets it dumps core"
        }
        SIGPIPE | SIGXFSZ => {
            "the kernel sends it when a write fails (a closed pipe, the file-size limit), and programs commonly ignore it (Python does)"
        }
        SIGXCPU | SIGIO | SIGPROF | SIGVTALRM => {
            "the kernel sends it on its own (the CPU-time limit, asynchronous I/O, profiling timers)"
        }
        _ => return None,
    })
}

/// A regular expression, compiled at load time so a bad pattern fails with its position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pattern(pub String);

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        regex::Regex::new(&s).map_err(|e| {
            de::Error::custom(with_fix(
                format!(
                    "`{s}` is not a valid regular expression: {}",
                    e.to_string().lines().last().unwrap_or("")
                ),
                "fix the pattern (Rust regex syntax; escape special characters with \\)",
            ))
        })?;
        Ok(Pattern(s))
    }
}

/// Free-form flags for SGLang/vLLM (`tp-size: 8`, `enable-hierarchical-cache: true`): key →
/// YAML scalar or list, in file order.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FlagMap(pub Vec<(String, serde_yaml::Value)>);

impl FlagMap {
    /// Look a flag up by either spelling (`tp-size` / `tp_size`).
    pub fn get(&self, name: &str) -> Option<&serde_yaml::Value> {
        let norm = |s: &str| s.replace('_', "-");
        let want = norm(name);
        self.0.iter().find(|(k, _)| norm(k) == want).map(|(_, v)| v)
    }
}

impl<'de> Deserialize<'de> for FlagMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FlagMap;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping of flag names to values")
            }
            fn visit_unit<E: de::Error>(self) -> Result<FlagMap, E> {
                Ok(FlagMap::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FlagMap, A::Error> {
                let mut out: Vec<(String, serde_yaml::Value)> = Vec::new();
                // Flag → index of its first key in `out`.
                let mut seen = std::collections::HashMap::new();
                while let Some(k) = map.next_key::<String>()? {
                    let v: serde_yaml::Value = map.next_value()?;
                    // `tp-size` and `tp_size` are one flag: both would reach the engine (which
                    // keeps the last) while the preflight reads the first.
                    if let Some(&i) = seen.get(&k.replace('_', "-")) {
                        let (first, _): &(String, _) = &out[i];
                        return Err(de::Error::custom(with_fix(
                            duplicate_flag_message(first, &k),
                            "keep one of the two lines",
                        )));
                    }
                    seen.insert(k.replace('_', "-"), out.len());
                    if matches!(
                        v,
                        serde_yaml::Value::Mapping(_) | serde_yaml::Value::Tagged(_)
                    ) {
                        return Err(de::Error::custom(with_fix(
                            format!("flag `{k}` has a mapping value"),
                            "flags take a scalar (string, number, boolean) or a list of scalars; pass JSON as a quoted string",
                        )));
                    }
                    out.push((k, v));
                }
                Ok(FlagMap(out))
            }
        }
        d.deserialize_any(V)
    }
}

const DUP_FLAG_START: &str = "flag `";
const DUP_FLAG_MID: &str = "` repeats `";
const DUP_FLAG_END: &str = "`: both are --";

/// "flag `tp_size` repeats `tp-size`: both are --tp-size". Plain text (the 2.0 loader prints it
/// as is); the recipe loader finds the first key's line with [`duplicate_flag_keys`].
fn duplicate_flag_message(first: &str, second: &str) -> String {
    format!(
        "{DUP_FLAG_START}{second}{DUP_FLAG_MID}{first}{DUP_FLAG_END}{}",
        first.replace('_', "-")
    )
}

/// The (first, second) keys of a [`duplicate_flag_message`].
pub(crate) fn duplicate_flag_keys(msg: &str) -> Option<(&str, &str)> {
    let rest = msg.strip_prefix(DUP_FLAG_START)?;
    let (second, rest) = rest.split_once(DUP_FLAG_MID)?;
    let (first, _) = rest.split_once(DUP_FLAG_END)?;
    Some((first, second))
}

/// Deserialize a field that is `null`-able with a meaning: absent → the field's `default`,
/// explicit `null` → `None`.
pub fn nullable<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d)
}
