//! srt-slurm 2.0's `roles.<role>.restart` (#451, `core/supervisor.py`): a policy name, or a
//! mapping of `policy` (`never`, `on-failure`, `always`), `max_restarts` (per worker over the
//! whole job, default 3), `backoff_seconds` (10, doubling per restart) and
//! `max_backoff_seconds` (300), as mcsup's restart settings. srtctl's backoff never resets and
//! its limit has no window: both are set so ("over the whole job" in the plan). Pure.

use std::time::Duration;

use super::error::{err, PlanError};
use crate::recipe::{PositiveSeconds, RestartConfig, RestartPolicyName, Seconds};

/// A span no job outlives: srtctl counts `max_restarts` over the whole job and never resets
/// its backoff.
pub const WHOLE_JOB: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// srtctl's defaults.
const MAX_RESTARTS: u32 = 3;
const BACKOFF_SECONDS: f64 = 10.0;
const MAX_BACKOFF_SECONDS: f64 = 300.0;

const KEYS: [&str; 4] = [
    "policy",
    "max_restarts",
    "backoff_seconds",
    "max_backoff_seconds",
];

/// `roles.<role>.restart` at `key` as a restart configuration.
pub fn from_recipe(v: &serde_yaml::Value, key: &str) -> Result<RestartConfig, PlanError> {
    let (policy, fields) = match v {
        serde_yaml::Value::String(s) => (policy(s, key)?, None),
        serde_yaml::Value::Mapping(m) => {
            for k in m.keys() {
                let k = k.as_str().unwrap_or_default();
                if !KEYS.contains(&k) {
                    return Err(err(
                        format!("{key}.{k}"),
                        "srtctl's restart policy has no such key",
                        format!("use {}", KEYS.join(", ")),
                    ));
                }
            }
            let p = match m.get("policy") {
                Some(serde_yaml::Value::String(s)) => policy(s, &format!("{key}.policy"))?,
                Some(_) => return Err(bad_policy(&format!("{key}.policy"), "a non-string")),
                None => RestartPolicyName::OnFailure,
            };
            (p, Some(m))
        }
        _ => {
            return Err(err(
                key,
                "is neither a policy name nor a mapping",
                "write restart: on-failure, or restart: {policy: on-failure, max_restarts: 3}",
            ))
        }
    };
    let number = |name: &str, default: f64| -> Result<f64, PlanError> {
        let Some(v) = fields.and_then(|m| m.get(name)) else {
            return Ok(default);
        };
        v.as_f64()
            .filter(|n| n.is_finite() && *n >= 0.0)
            .ok_or_else(|| {
                err(
                    format!("{key}.{name}"),
                    format!("`{}` is not a number of seconds, 0 or more", show(v)),
                    format!("write {name}: {default}"),
                )
            })
    };
    let max_restarts = match fields.and_then(|m| m.get("max_restarts")) {
        None => MAX_RESTARTS,
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| {
                err(
                    format!("{key}.max_restarts"),
                    format!("`{}` is not a whole number, 0 or more", show(v)),
                    "write max_restarts: 3",
                )
            })?,
    };
    let backoff = number("backoff_seconds", BACKOFF_SECONDS)?;
    let max_backoff = number("max_backoff_seconds", MAX_BACKOFF_SECONDS)?;
    if max_backoff < backoff {
        return Err(err(
            format!("{key}.max_backoff_seconds"),
            format!("{max_backoff} s is below backoff_seconds ({backoff} s)"),
            "make max_backoff_seconds at least backoff_seconds",
        ));
    }
    Ok(RestartConfig {
        policy: Some(policy),
        success_codes: None,
        backoff_initial_seconds: Some(Seconds(backoff)),
        backoff_factor: Some(2.0),
        backoff_max_seconds: Some(Seconds(max_backoff)),
        reset_after_seconds: Some(Seconds(WHOLE_JOB.as_secs_f64())),
        max_restarts: Some(max_restarts),
        window_seconds: Some(PositiveSeconds(WHOLE_JOB.as_secs_f64())),
        release_wait_seconds: None,
    })
}

fn policy(s: &str, key: &str) -> Result<RestartPolicyName, PlanError> {
    match s {
        "never" => Ok(RestartPolicyName::Never),
        "on-failure" => Ok(RestartPolicyName::OnFailure),
        "always" => Ok(RestartPolicyName::Always),
        other => Err(bad_policy(key, &format!("`{other}`"))),
    }
}

fn bad_policy(key: &str, what: &str) -> PlanError {
    err(
        key,
        format!("{what} is not a restart policy"),
        "use never, on-failure or always",
    )
}

fn show(v: &serde_yaml::Value) -> String {
    serde_yaml::to_string(v)
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> Result<RestartConfig, String> {
        let v: serde_yaml::Value = serde_yaml::from_str(yaml).unwrap();
        from_recipe(&v, "roles.decode.restart").map_err(|e| e.to_string())
    }

    #[test]
    fn a_name_takes_srtctls_defaults_over_the_whole_job() {
        let c = read("always").unwrap();
        assert_eq!(c.policy, Some(RestartPolicyName::Always));
        assert_eq!(c.max_restarts, Some(3));
        assert_eq!(c.backoff_initial_seconds, Some(Seconds(10.0)));
        assert_eq!(c.backoff_factor, Some(2.0));
        assert_eq!(c.backoff_max_seconds, Some(Seconds(300.0)));
        assert_eq!(
            c.window_seconds,
            Some(PositiveSeconds(WHOLE_JOB.as_secs_f64()))
        );
        assert_eq!(
            c.reset_after_seconds,
            Some(Seconds(WHOLE_JOB.as_secs_f64()))
        );
    }

    #[test]
    fn a_mapping_sets_what_it_names() {
        let c = read("{policy: on-failure, max_restarts: 5, backoff_seconds: 2}").unwrap();
        assert_eq!(c.policy, Some(RestartPolicyName::OnFailure));
        assert_eq!(c.max_restarts, Some(5));
        assert_eq!(c.backoff_initial_seconds, Some(Seconds(2.0)));
        assert_eq!(c.backoff_max_seconds, Some(Seconds(300.0)));
    }

    #[test]
    fn bad_values_name_their_key() {
        for (yaml, want) in [
            (
                "sometimes",
                "roles.decode.restart: `sometimes` is not a restart policy",
            ),
            ("{policy: maybe}", "roles.decode.restart.policy: `maybe`"),
            (
                "{retries: 3}",
                "roles.decode.restart.retries: srtctl's restart policy has no such key",
            ),
            (
                "{max_restarts: -1}",
                "roles.decode.restart.max_restarts: `-1` is not a whole number",
            ),
            (
                "{backoff_seconds: x}",
                "roles.decode.restart.backoff_seconds: `x` is not a number",
            ),
            (
                "{backoff_seconds: 20, max_backoff_seconds: 5}",
                "roles.decode.restart.max_backoff_seconds: 5 s is below",
            ),
            (
                "[always]",
                "roles.decode.restart: is neither a policy name nor a mapping",
            ),
        ] {
            let e = read(yaml).unwrap_err();
            assert!(e.contains(want) && e.contains("fix:"), "{yaml}: {e}");
        }
    }
}
