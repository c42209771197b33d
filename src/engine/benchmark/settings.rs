//! `benchmark:` as srtctl's schema loads it (`core/schema.py: BenchmarkConfig` @ c88ef731):
//! every key with its type, read once, with errors naming `benchmark.<key>`. Values keep what
//! Python's `str()` of the loaded value prints, where srtctl renders them into a command. Pure.

use crate::domain::{plan_err, PlanError};
use crate::engine::flags::{python_float, python_str};
use crate::engine::reader::Reader;
use crate::recipe::Recipe;

/// The keys of srtctl's `BenchmarkConfig` (the plan lists no other as read).
pub const RECIPE_KEYS: &[&str] = &[
    "type",
    "isl",
    "osl",
    "concurrencies",
    "req_rate",
    "client_placement",
    "client_dedicated_node",
    "colocate_with_frontend",
    "sweep",
    "num_examples",
    "max_tokens",
    "repeat",
    "num_threads",
    "max_context_length",
    "categories",
    "num_shots",
    "temperature",
    "top_p",
    "top_k",
    "num_requests",
    "concurrency",
    "prefix_ratios",
    "mooncake_workload",
    "ttft_threshold_ms",
    "itl_threshold_ms",
    "random_range_ratio",
    "num_prompts_mult",
    "num_warmup_mult",
    "dataset_name",
    "dataset_path",
    "trace_file",
    "custom_tokenizer",
    "use_chat_template",
    "reuse_http_connections",
    "command",
    "container_image",
    "env",
    "aiperf_package",
    "aiperf_args",
    "export_node_metrics",
    "slow_down_sleep_time",
    "slow_down_wait_time",
    // mcsup's own: the result gate's bound on failed requests (docs/recipe.md).
    "max_failed_requests",
];

/// `concurrencies`: srtctl's `list[int] | str`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Concurrencies {
    List(Vec<i64>),
    /// As written (`"4x8x16"`).
    Text(String),
}

impl Concurrencies {
    /// A list joined with `sep` (sa-bench's `x`, trace-replay's `,`); a string verbatim.
    pub fn joined(&self, sep: &str) -> String {
        match self {
            Concurrencies::List(v) => v.iter().map(i64::to_string).collect::<Vec<_>>().join(sep),
            Concurrencies::Text(s) => s.clone(),
        }
    }

    /// srtctl's `get_concurrency_list`: a string split at `x`.
    pub fn list(&self) -> Result<Vec<i64>, String> {
        match self {
            Concurrencies::List(v) => Ok(v.clone()),
            Concurrencies::Text(s) => s
                .split('x')
                .map(|p| {
                    p.trim()
                        .parse::<i64>()
                        .map_err(|_| format!("`{p}` is not a number"))
                })
                .collect(),
        }
    }

    /// Whether Python would take it as true (`if concurrencies`): not empty.
    pub fn truthy(&self) -> bool {
        match self {
            Concurrencies::List(v) => !v.is_empty(),
            Concurrencies::Text(s) => !s.is_empty(),
        }
    }
}

/// `req_rate` as loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReqRate {
    Text(String),
    Number(i64),
}

impl ReqRate {
    /// Python's `str()`.
    pub fn text(&self) -> String {
        match self {
            ReqRate::Text(s) => s.clone(),
            ReqRate::Number(n) => n.to_string(),
        }
    }

    /// Python's truthiness (`if req_rate`).
    pub fn truthy(&self) -> bool {
        match self {
            ReqRate::Text(s) => !s.is_empty(),
            ReqRate::Number(n) => *n != 0,
        }
    }
}

/// `benchmark:` with srtctl's defaults; numbers as loaded (`str()` renders them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BenchmarkSettings {
    /// `type` (default `manual`).
    pub kind: String,
    pub isl: Option<i64>,
    pub osl: Option<i64>,
    pub concurrencies: Option<Concurrencies>,
    /// `req_rate`: `str | int` (default `"inf"`); `None` when written as null.
    pub req_rate: Option<ReqRate>,
    /// `client_placement` (default `head`).
    pub client_placement: String,
    pub num_examples: Option<i64>,
    pub max_tokens: Option<i64>,
    pub repeat: Option<i64>,
    pub num_threads: Option<i64>,
    pub max_context_length: Option<i64>,
    pub categories: Option<Vec<String>>,
    pub num_shots: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub num_requests: Option<i64>,
    pub concurrency: Option<i64>,
    /// `prefix_ratios`: `list[float] | str`, rendered space-joined.
    pub prefix_ratios: Option<String>,
    pub mooncake_workload: Option<String>,
    pub ttft_threshold_ms: Option<i64>,
    pub itl_threshold_ms: Option<i64>,
    pub random_range_ratio: Option<f64>,
    pub num_prompts_mult: Option<i64>,
    pub num_warmup_mult: Option<i64>,
    pub dataset_name: Option<String>,
    pub dataset_path: Option<String>,
    pub trace_file: Option<String>,
    pub custom_tokenizer: Option<String>,
    /// Default true.
    pub use_chat_template: bool,
    pub reuse_http_connections: bool,
    pub command: Option<String>,
    pub container_image: Option<String>,
    /// `env`, in order.
    pub env: Vec<(String, String)>,
    pub aiperf_package: Option<String>,
    /// `aiperf_args`, in order (srtctl's dict keeps the file's order).
    pub aiperf_args: Vec<(String, serde_yaml::Value)>,
    pub slow_down_sleep_time: Option<f64>,
    pub slow_down_wait_time: Option<f64>,
    /// mcsup's result gate: at most this many failed requests (default 0).
    pub max_failed_requests: u64,
}

impl BenchmarkSettings {
    /// Read `benchmark:` (absent: `manual`, srtctl's default).
    pub fn from_recipe(recipe: &Recipe) -> Result<Self, PlanError> {
        let r = Reader {
            recipe,
            section: "benchmark",
        };
        if let Some(v) = recipe.raw_get(&["benchmark"]) {
            if !v.is_mapping() {
                return Err(plan_err(
                    "benchmark",
                    "is not a mapping",
                    "write benchmark: {type: sa-bench, ...}",
                ));
            }
        }
        if let Some((key, closest)) = unknown_keys(recipe).into_iter().next() {
            return Err(plan_err(
                format!("benchmark.{key}"),
                format!("`{key}` is not a benchmark key srtctl knows (its schema refuses it)"),
                match closest {
                    Some(k) => format!("did you mean `{k}`?"),
                    None => "remove it (docs/recipe.md lists the benchmark keys)".to_string(),
                },
            ));
        }
        let written = recipe.raw.get("benchmark").and_then(|b| b.get("req_rate"));
        let req_rate = match written {
            None => Some(ReqRate::Text("inf".into())),
            Some(serde_yaml::Value::Null) => None,
            Some(serde_yaml::Value::String(s)) => Some(ReqRate::Text(s.clone())),
            Some(_) => r.int("req_rate")?.map(ReqRate::Number),
        };
        Ok(BenchmarkSettings {
            kind: r.string("type")?.unwrap_or_else(|| "manual".into()),
            isl: r.int("isl")?,
            osl: r.int("osl")?,
            concurrencies: concurrencies(&r)?,
            req_rate,
            client_placement: r
                .string("client_placement")?
                .unwrap_or_else(|| "head".into()),
            num_examples: r.int("num_examples")?,
            max_tokens: r.int("max_tokens")?,
            repeat: r.int("repeat")?,
            num_threads: r.int("num_threads")?,
            max_context_length: r.int("max_context_length")?,
            categories: strings(&r, "categories")?,
            num_shots: r.int("num_shots")?,
            temperature: r.float("temperature")?,
            top_p: r.float("top_p")?,
            top_k: r.int("top_k")?,
            num_requests: r.int("num_requests")?,
            concurrency: r.int("concurrency")?,
            prefix_ratios: prefix_ratios(&r)?,
            mooncake_workload: r.string("mooncake_workload")?,
            ttft_threshold_ms: r.int("ttft_threshold_ms")?,
            itl_threshold_ms: r.int("itl_threshold_ms")?,
            random_range_ratio: r.float("random_range_ratio")?,
            num_prompts_mult: r.int("num_prompts_mult")?,
            num_warmup_mult: r.int("num_warmup_mult")?,
            dataset_name: r.string("dataset_name")?,
            dataset_path: r.string("dataset_path")?,
            trace_file: r.string("trace_file")?,
            custom_tokenizer: r.string("custom_tokenizer")?,
            use_chat_template: r.boolean("use_chat_template")?.unwrap_or(true),
            reuse_http_connections: r.boolean("reuse_http_connections")?.unwrap_or(false),
            command: r.string("command")?,
            container_image: r.string("container_image")?,
            env: string_map(&r, "env")?,
            aiperf_package: r.string("aiperf_package")?,
            aiperf_args: mapping(&r, "aiperf_args")?,
            slow_down_sleep_time: r.float("slow_down_sleep_time")?,
            slow_down_wait_time: r.float("slow_down_wait_time")?,
            max_failed_requests: match r.int("max_failed_requests")? {
                None => 0,
                Some(n) => u64::try_from(n).map_err(|_| {
                    plan_err(
                        "benchmark.max_failed_requests",
                        format!("{n} is not a count"),
                        "write max_failed_requests: 0 (or how many may fail)",
                    )
                })?,
            },
        })
    }
}

fn concurrencies(r: &Reader<'_>) -> Result<Option<Concurrencies>, PlanError> {
    match r.raw("concurrencies") {
        None => Ok(None),
        Some(serde_yaml::Value::String(s)) => Ok(Some(Concurrencies::Text(s.clone()))),
        Some(serde_yaml::Value::Sequence(items)) => {
            let mut out = Vec::new();
            for v in items {
                let n = match v {
                    serde_yaml::Value::Number(n) => n.as_i64(),
                    serde_yaml::Value::String(s) => s.trim().parse().ok(),
                    _ => None,
                };
                match n {
                    Some(n) => out.push(n),
                    None => return Err(r.bad("concurrencies", v, "a whole number", "[4, 8, 16]")),
                }
            }
            Ok(Some(Concurrencies::List(out)))
        }
        Some(v) => Err(r.bad(
            "concurrencies",
            v,
            "a list of numbers or an `x`-separated string",
            "\"4x8x16\"",
        )),
    }
}

fn prefix_ratios(r: &Reader<'_>) -> Result<Option<String>, PlanError> {
    match r.raw("prefix_ratios") {
        None => Ok(None),
        Some(serde_yaml::Value::String(s)) => Ok(Some(s.clone())),
        Some(serde_yaml::Value::Sequence(items)) => {
            let mut out = Vec::new();
            for v in items {
                let f = match v {
                    serde_yaml::Value::Number(n) => n.as_f64(),
                    serde_yaml::Value::String(s) => s.trim().parse().ok(),
                    _ => None,
                };
                match f {
                    Some(f) => out.push(python_float(f)),
                    None => return Err(r.bad("prefix_ratios", v, "a number", "[0.1, 0.5]")),
                }
            }
            // An empty list is falsy in srtctl: its default then applies.
            Ok((!out.is_empty()).then(|| out.join(" ")))
        }
        Some(v) => Err(r.bad("prefix_ratios", v, "a list of numbers", "[0.1, 0.5]")),
    }
}

fn strings(r: &Reader<'_>, key: &str) -> Result<Option<Vec<String>>, PlanError> {
    match r.raw(key) {
        None => Ok(None),
        Some(serde_yaml::Value::Sequence(items)) => items
            .iter()
            .map(|v| match v {
                serde_yaml::Value::String(s) => Ok(s.clone()),
                other => Err(r.bad(key, other, "a string", "\"name\"")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(v) => Err(r.bad(key, v, "a list of strings", "[a, b]")),
    }
}

fn string_map(r: &Reader<'_>, key: &str) -> Result<Vec<(String, String)>, PlanError> {
    Ok(mapping(r, key)?
        .into_iter()
        .map(|(k, v)| (k, python_str(&v)))
        .collect())
}

fn mapping(r: &Reader<'_>, key: &str) -> Result<Vec<(String, serde_yaml::Value)>, PlanError> {
    match r.raw(key) {
        None => Ok(Vec::new()),
        Some(serde_yaml::Value::Mapping(m)) => {
            Ok(m.iter().map(|(k, v)| (python_str(k), v.clone())).collect())
        }
        Some(v) => Err(r.bad(key, v, "a mapping", "{name: value}")),
    }
}

/// The settings keys a recipe sets that srtctl's schema does not know (marshmallow refuses
/// them): `(key, closest known)`.
pub fn unknown_keys(recipe: &Recipe) -> Vec<(String, Option<&'static str>)> {
    let Some(serde_yaml::Value::Mapping(m)) = recipe.raw_get(&["benchmark"]) else {
        return Vec::new();
    };
    m.keys()
        .filter_map(|k| k.as_str())
        .filter(|k| !RECIPE_KEYS.contains(k))
        .map(|k| {
            (
                k.to_string(),
                crate::domain::suggest(k, RECIPE_KEYS.iter().copied()),
            )
        })
        .collect()
}

/// `str()` of an optional number, or `default`.
pub fn or_str(v: Option<i64>, default: &str) -> String {
    v.map_or_else(|| default.to_string(), |n| n.to_string())
}

/// Python's `x or default` for a loaded number: 0 falls back too.
pub fn or_default(v: Option<i64>, default: i64) -> String {
    match v {
        Some(n) if n != 0 => n.to_string(),
        _ => default.to_string(),
    }
}

/// The aiperf flags of `aiperf_args` as srtctl's `append_aiperf_args` writes them: `true` →
/// `--key`, `false` → nothing, anything else → `--key str(value)`.
pub fn aiperf_flags(args: &[(String, serde_yaml::Value)]) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in args {
        match v {
            serde_yaml::Value::Bool(true) => out.push(format!("--{k}")),
            serde_yaml::Value::Bool(false) => {}
            v => {
                out.push(format!("--{k}"));
                out.push(python_str(v));
            }
        }
    }
    out
}
