//! srtctl's `observability:` as it reaches the processes (v1 recipes): OTEL tracing env on every
//! worker and frontend (`core/schema.py: build_otel_env`), and the `enabled` knob's expansion
//! (`core/config.py: expand_observability`): Dynamo's span-event env as a default in each role's
//! env and in `frontend.env`, plus the frontend's request-trace file. The rest of the section
//! (`scrape_*`, `tachometer`, `build_dashboard`) is benchmark-time work srtctl does outside the
//! workers; mcsup lists it as not read. Pure.

use super::reader::Reader;
use crate::domain::PlanError;
use crate::recipe::{EnvMap, Recipe};

/// Dynamo's span events on stdout, one JSONL line per closed span (DEBUG level), as srtctl's
/// `ANALYTICS_SPAN_ENV`.
const SPAN_ENV: [(&str, &str); 3] = [
    ("DYN_LOGGING_SPAN_EVENTS", "true"),
    ("DYN_LOGGING_JSONL", "true"),
    ("DYN_LOG", "debug"),
];

/// The frontend's per-request trace records, as srtctl's `ANALYTICS_REQUEST_TRACE_ENV`; the file
/// goes into the job's log directory (srtctl's `/logs` in its container).
const REQUEST_TRACE: &str = "DYN_REQUEST_TRACE";
const REQUEST_TRACE_FILE: &str = "DYN_REQUEST_TRACE_FILE_PATH";

/// `observability:` with srtctl's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observability {
    /// `enabled`: the analytics knob (span env on workers and frontends, request traces).
    pub enabled: bool,
    /// `otel_endpoint`, when `enable_otel` is on and the endpoint is set (srtctl injects nothing
    /// otherwise).
    pub otel_endpoint: Option<String>,
}

impl Observability {
    pub fn from_recipe(recipe: &Recipe) -> Result<Self, PlanError> {
        let r = Reader {
            recipe,
            section: "observability",
        };
        let enabled = r.boolean("enabled")?.unwrap_or(false);
        let otel = r.boolean("enable_otel")?.unwrap_or(false);
        let endpoint = r.string("otel_endpoint")?.filter(|e| !e.is_empty());
        Ok(Self {
            enabled,
            otel_endpoint: endpoint.filter(|_| otel),
        })
    }

    /// srtctl's `build_otel_env(observability, component)`: `component` is the worker's mode
    /// (`prefill`, `decode`, `agg`) or `frontend`.
    pub fn otel_env(&self, component: &str) -> Vec<(String, String)> {
        let Some(endpoint) = &self.otel_endpoint else {
            return Vec::new();
        };
        vec![
            ("DYN_LOGGING_JSONL".into(), "1".into()),
            ("OTEL_EXPORT_ENABLED".into(), "1".into()),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT".into(),
                endpoint.clone(),
            ),
            ("OTEL_SERVICE_NAME".into(), format!("dynamo-{component}")),
        ]
    }

    /// A role's env with the span env added where the recipe sets nothing (`enabled` only).
    pub fn role_env(&self, env: &EnvMap) -> EnvMap {
        let mut out = env.clone();
        if self.enabled {
            let added = missing(&env.0, SPAN_ENV.iter().map(|(k, v)| (*k, v.to_string())));
            out.0.extend(added);
        }
        out
    }

    /// What the `enabled` knob adds after `frontend.env` (`env`): the span env and the
    /// request-trace file, each where the recipe sets nothing; `log_dir` is where the trace file
    /// goes.
    pub fn frontend_defaults(
        &self,
        env: &[(String, String)],
        log_dir: &str,
    ) -> Vec<(String, String)> {
        if !self.enabled {
            return Vec::new();
        }
        let trace = format!("{}/dynamo-request-trace", log_dir.trim_end_matches('/'));
        let defaults = SPAN_ENV.iter().map(|(k, v)| (*k, v.to_string())).chain([
            (REQUEST_TRACE, "1".to_string()),
            (REQUEST_TRACE_FILE, trace),
        ]);
        missing(env, defaults)
    }
}

/// Python's `dict.setdefault`, for each pair in order: the ones `env` does not set.
fn missing<'a>(
    env: &[(String, String)],
    defaults: impl Iterator<Item = (&'a str, String)>,
) -> Vec<(String, String)> {
    defaults
        .filter(|(k, _)| !env.iter().any(|(name, _)| name == k))
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str) -> Result<Observability, PlanError> {
        let r = crate::recipe::parse_str(std::path::Path::new("r.yaml"), yaml).unwrap();
        Observability::from_recipe(&r)
    }

    #[test]
    fn otel_needs_both_the_switch_and_an_endpoint() {
        let base = "backend: {type: sglang}\n";
        let o = load(&format!("{base}observability: {{enable_otel: true}}")).unwrap();
        assert!(o.otel_env("prefill").is_empty());
        let o = load(&format!(
            "{base}observability: {{otel_endpoint: 'http://c:4317'}}"
        ))
        .unwrap();
        assert!(o.otel_env("prefill").is_empty());
        let o = load(&format!(
            "{base}observability: {{enable_otel: true, otel_endpoint: 'http://c:4317'}}"
        ))
        .unwrap();
        let env = o.otel_env("decode");
        assert_eq!(env.len(), 4);
        assert_eq!(env[3], ("OTEL_SERVICE_NAME".into(), "dynamo-decode".into()));
    }

    #[test]
    fn the_knob_adds_defaults_the_recipe_can_override() {
        let o = load("backend: {type: sglang}\nobservability: {enabled: true}").unwrap();
        let role = o.role_env(&EnvMap(vec![("DYN_LOG".into(), "warn".into())]));
        assert_eq!(role.get("DYN_LOG"), Some("warn"));
        assert_eq!(role.get("DYN_LOGGING_SPAN_EVENTS"), Some("true"));
        let fe = o.frontend_defaults(&[], "/j/logs/");
        assert_eq!(fe.len(), 5);
        assert_eq!(fe[4].1, "/j/logs/dynamo-request-trace");
        let given = [("DYN_LOG".to_string(), "info".to_string())];
        let fe = o.frontend_defaults(&given, "/j/logs");
        assert_eq!(fe.len(), 4, "{fe:?}");
        assert!(!fe.iter().any(|(k, _)| k == "DYN_LOG"));
        let off = load("backend: {type: sglang}").unwrap();
        assert!(off.frontend_defaults(&[], "/l").is_empty());
    }

    #[test]
    fn a_bad_value_names_its_key() {
        let e = load("backend: {type: sglang}\nobservability: {enabled: maybe}").unwrap_err();
        assert!(e.to_string().contains("observability.enabled"), "{e}");
    }
}
