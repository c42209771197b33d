//! `mcsup migrate`: print the srt-slurm 2.0 form (`schema: 2`, `engine:`, `roles:`, `services:`)
//! of a v1 recipe, including the seed's `mooncake_kv_store.standalone`, which `srtctl migrate`
//! has no rule for.
//!
//! The fold follows `srtctl migrate` (NVIDIA/srt-slurm 2.0 `src/srtctl/core/migrate.py`, and the
//! key map of `docs/legacy-v1.md` @17c4ece9):
//! `resources.<role>_{nodes,workers}` / `gpus_per_<role>` and `backend.<role>_environment` /
//! `backend.<engine>_config.<role>` move under `roles.<role>`; `backend.mooncake_kv_store`
//! becomes a `mooncake-master` service (container, `master_extra_args` → `args`, `store_config`
//! → `options.store_config`) and its `env` is copied into every role; `backend` becomes
//! `engine`. Beyond srtctl: the seed's placements become `mooncake-store` services (one per role,
//! or one `placement.node: workers` entry when every role's placement is identical, which is what
//! the seed's co-located merge meant), and `master_args`, which replaced the master's tunables,
//! becomes the master's whole `command`. Other backend keys ride on the engine mapping
//! (`engine: {type: vllm, connector: nixl}`), `kv_events_config` moves to `roles.<role>.kv_events`. Every other key stays where it was, in order. Comments
//! are not kept (serde_yaml drops them). Values keep the meaning srtctl's YAML 1.1 loader gave
//! them: the recipe is read as PyYAML reads it, and a string YAML 1.1 would retype (`"yes"`,
//! `"12:00:00"`, `"1_000"`) is written quoted. Pure: text in, text out.

use serde_yaml::{Mapping, Value};

use crate::domain::Role;
use crate::mooncake;
use crate::recipe::{self, Recipe};

/// Why a recipe cannot be migrated.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("{0}")]
    Recipe(#[from] recipe::RecipeError),
    #[error("the recipe is already in the 2.0 layout (it has {0}); nothing to migrate")]
    AlreadyV2(String),
    #[error("cannot re-read the recipe as YAML: {0}")]
    Yaml(String),
}

fn key(s: &str) -> Value {
    Value::String(s.to_string())
}

/// What the migration noted (printed as comments above the YAML).
pub struct Migrated {
    pub yaml: String,
    pub notes: Vec<String>,
}

/// Migrate recipe text (`path` is for messages only).
pub fn migrate(path: &std::path::Path, text: &str) -> Result<Migrated, MigrateError> {
    let parsed: Recipe = recipe::parse_str(path, text)?;
    for (k, set) in [
        ("schema", parsed.schema.is_some()),
        ("engine", parsed.engine.is_some()),
        ("roles", parsed.roles.is_some()),
        ("services", parsed.services.is_some()),
    ] {
        if set {
            return Err(MigrateError::AlreadyV2(format!("`{k}:`")));
        }
    }
    // As srtctl reads it: its output must mean to srtctl what the recipe meant.
    let doc: Value = load_as_srtctl(text)?;
    let Value::Mapping(top) = doc else {
        return Err(MigrateError::Yaml("the top level is not a mapping".into()));
    };
    let mut notes = Vec::new();
    let backend = top
        .get("backend")
        .and_then(Value::as_mapping)
        .cloned()
        .unwrap_or_default();
    let engine_type = backend
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("sglang")
        .to_string();
    let mut resources = top.get("resources").and_then(Value::as_mapping).cloned();
    let mut roles = v1_roles(&parsed, &backend, &engine_type, resources.as_mut());
    kv_events_to_roles(&backend, &mut roles);
    let mut services: Vec<Value> = Vec::new();
    let mut leftover = Mapping::new();
    if let Some(mk) = backend.get("mooncake_kv_store").and_then(Value::as_mapping) {
        services.push(master_service(mk, &parsed, &mut notes));
        if let Some(env) = mk
            .get("env")
            .and_then(Value::as_mapping)
            .filter(|e| !e.is_empty())
        {
            if roles.is_empty() {
                leftover.insert(key("env"), Value::Mapping(env.clone()));
                notes.push("backend.mooncake_kv_store.env left as is (no roles in this recipe to carry it)".into());
            } else {
                env_into_roles(env, &mut roles);
            }
        }
        if let Some(sa) = mk.get("standalone").and_then(Value::as_mapping) {
            services.extend(store_services(sa, &roles, &mut notes));
        }
    }
    let frontend = top
        .get("frontend")
        .and_then(|f| f.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("dynamo");
    // Dynamo's frontend discovers its workers through etcd.
    if crate::engine::frontend::FrontendType::named(frontend)
        .is_some_and(|f| f.kind().discovers_workers())
    {
        notes.push("2.0 implies an etcd service for the default dynamo frontend (srtctl ran one for v1 too); mcsup's v1 reading ran none, the 2.0 form will".into());
    }
    let engine = engine_value(&backend, &engine_type, leftover);
    let mut out = Mapping::new();
    out.insert(key("schema"), Value::Number(2.into()));
    // Keep the original order: the engine, roles and services where `backend:` was.
    for (k, v) in &top {
        match k.as_str() {
            Some("backend") => {
                out.insert(key("engine"), engine.clone());
                if !roles.is_empty() {
                    out.insert(key("roles"), Value::Mapping(roles.clone()));
                }
                if !services.is_empty() {
                    out.insert(key("services"), Value::Sequence(services.clone()));
                }
            }
            Some("resources") => {
                if let Some(r) = &resources {
                    out.insert(k.clone(), Value::Mapping(r.clone()));
                }
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    let yaml = to_yaml_for_srtctl(text, Value::Mapping(out))?;
    Ok(Migrated { yaml, notes })
}

/// PyYAML's implicit resolvers (YAML 1.1, `yaml/resolver.py`), which srtctl loads recipes
/// with: what a plain scalar is besides a string.
struct Yaml11 {
    boolean: regex::Regex,
    int: regex::Regex,
    float: regex::Regex,
    /// Null, dates, and the merge and value keys: not strings either.
    other: regex::Regex,
}

fn yaml11() -> &'static Yaml11 {
    static RESOLVERS: std::sync::OnceLock<Yaml11> = std::sync::OnceLock::new();
    RESOLVERS.get_or_init(|| {
        let re = |s: &str| regex::Regex::new(s).expect("PyYAML's resolvers");
        Yaml11 {
            boolean: re(r"^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$"),
            int: re(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$"),
            float: re(r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
            other: re(r"^(?:~|null|Null|NULL||<<|=|[0-9]{4}-[0-9]{2}-[0-9]{2}|[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9]{1,2}(?::[0-9]{2})?))?)$"),
        }
    })
}

/// Whether a YAML 1.1 loader would read this string, written plain, as something else: a
/// boolean (`yes`, `On`), a number (`1_000`, `0x1f`, `017`, the base-60 `12:00:00`), a date
/// (`2024-01-01`), null, or the merge and value keys.
fn yaml11_retypes(s: &str) -> bool {
    let r = yaml11();
    r.boolean.is_match(s) || r.int.is_match(s) || r.float.is_match(s) || r.other.is_match(s)
}

/// A plain scalar as YAML 1.1 types it: booleans, integers (bases 2, 8, 10, 16 and 60, with
/// `_`), floats and null. A date stays its text (srtctl would get a date; no recipe key wants
/// one), as does a number too large for the value.
fn yaml11_scalar(s: &str) -> Value {
    let r = yaml11();
    if matches!(s, "~" | "null" | "Null" | "NULL" | "") {
        return Value::Null;
    }
    if r.boolean.is_match(s) {
        return Value::Bool(matches!(
            s,
            "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON"
        ));
    }
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let digits = digits.replace('_', "");
    let sign = if negative { -1 } else { 1 };
    if r.int.is_match(s) {
        let parsed = if digits.contains(':') {
            digits.split(':').try_fold(0i64, |acc, d| {
                acc.checked_mul(60)?.checked_add(d.parse().ok()?)
            })
        } else if let Some(b) = digits.strip_prefix("0b") {
            i64::from_str_radix(b, 2).ok()
        } else if let Some(h) = digits.strip_prefix("0x") {
            i64::from_str_radix(h, 16).ok()
        } else if digits.len() > 1 && digits.starts_with('0') {
            i64::from_str_radix(&digits[1..], 8).ok()
        } else {
            digits.parse().ok()
        };
        return parsed.map_or_else(
            || Value::String(s.to_string()),
            |n| Value::Number((sign * n).into()),
        );
    }
    if r.float.is_match(s) {
        let lower = digits.to_ascii_lowercase();
        let parsed = match lower.as_str() {
            ".inf" => Some(f64::INFINITY),
            ".nan" => Some(f64::NAN),
            _ if lower.contains(':') => lower
                .split(':')
                .try_fold(0f64, |acc, d| Some(acc * 60.0 + d.parse::<f64>().ok()?)),
            _ => lower.parse().ok(),
        };
        return parsed.map_or_else(
            || Value::String(s.to_string()),
            |f| Value::Number((sign as f64 * f).into()),
        );
    }
    Value::String(s.to_string())
}

/// The recipe as srtctl's loader types it (PyYAML's `safe_load`, YAML 1.1): a plain scalar is
/// a boolean, number or null by YAML 1.1's rules (plain `yes` is true, plain `12:00:00` is
/// 43200), a quoted one a string, whatever it looks like. Aliases are resolved; a merge key
/// stays a key (as serde_yaml reads it). The first document only.
fn load_as_srtctl(text: &str) -> Result<Value, MigrateError> {
    use yaml_rust2::parser::{Event, Parser};
    use yaml_rust2::scanner::TScalarStyle;
    enum Open {
        Seq(Vec<Value>, usize),
        Map(Mapping, Option<Value>, usize),
    }
    let mut stack: Vec<Open> = Vec::new();
    let mut anchors: std::collections::HashMap<usize, Value> = Default::default();
    let mut root: Option<Value> = None;
    let place = |v: Value, stack: &mut Vec<Open>, root: &mut Option<Value>| match stack.last_mut() {
        Some(Open::Seq(items, _)) => items.push(v),
        Some(Open::Map(m, key, _)) => match key.take() {
            None => *key = Some(v),
            Some(k) => {
                m.insert(k, v);
            }
        },
        None => *root = Some(v),
    };
    let mut parser = Parser::new_from_str(text);
    loop {
        let (event, _) = parser
            .next_token()
            .map_err(|e| MigrateError::Yaml(e.to_string()))?;
        let (v, anchor) = match event {
            Event::StreamEnd | Event::DocumentEnd => break,
            Event::Scalar(s, style, anchor, tag) => {
                let v = if style == TScalarStyle::Plain && tag.is_none() {
                    yaml11_scalar(&s)
                } else {
                    Value::String(s)
                };
                (v, anchor)
            }
            Event::Alias(id) => (anchors.get(&id).cloned().unwrap_or(Value::Null), 0),
            Event::SequenceStart(anchor, _) => {
                stack.push(Open::Seq(Vec::new(), anchor));
                continue;
            }
            Event::MappingStart(anchor, _) => {
                stack.push(Open::Map(Mapping::new(), None, anchor));
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => match stack.pop() {
                Some(Open::Seq(items, anchor)) => (Value::Sequence(items), anchor),
                Some(Open::Map(m, _, anchor)) => (Value::Mapping(m), anchor),
                None => return Err(MigrateError::Yaml("unbalanced YAML events".into())),
            },
            _ => continue,
        };
        if anchor > 0 {
            anchors.insert(anchor, v.clone());
        }
        place(v, &mut stack, &mut root);
    }
    Ok(root.unwrap_or(Value::Null))
}

/// `out` as YAML that srtctl reads as it read the recipe: serde_yaml quotes what YAML 1.2 would
/// retype, not what YAML 1.1 would, so `time_limit: "12:00:00"` came out plain and PyYAML read
/// 43200. The recipe was loaded as srtctl loads it ([`load_as_srtctl`]): what is still a string
/// is one for srtctl, and every such string that YAML 1.1 would retype is written
/// double-quoted.
fn to_yaml_for_srtctl(text: &str, out: Value) -> Result<String, MigrateError> {
    let mut n = 0u32;
    let marker = loop {
        let m = format!("mcsupquoted{n}x");
        if !text.contains(&m) {
            break m;
        }
        n += 1;
    };
    let mut held: Vec<String> = Vec::new();
    let mut hold = |s: &str| -> Option<Value> {
        if !yaml11_retypes(s) {
            return None;
        }
        held.push(s.to_string());
        Some(Value::String(format!("{marker}{}e", held.len() - 1)))
    };
    let out = quote_for_yaml11(out, &mut hold);
    let mut yaml = serde_yaml::to_string(&out).map_err(|e| MigrateError::Yaml(e.to_string()))?;
    // The index sits between `x` and `e`: no stand-in is part of another.
    for (i, s) in held.iter().enumerate() {
        let quoted = serde_json::to_string(s).map_err(|e| MigrateError::Yaml(e.to_string()))?;
        yaml = yaml.replace(&format!("{marker}{i}e"), &quoted);
    }
    Ok(yaml)
}

/// `v` with each string (keys too) that `hold` takes replaced by its stand-in.
fn quote_for_yaml11(v: Value, hold: &mut impl FnMut(&str) -> Option<Value>) -> Value {
    match v {
        Value::String(s) => hold(&s).unwrap_or(Value::String(s)),
        Value::Sequence(items) => Value::Sequence(
            items
                .into_iter()
                .map(|i| quote_for_yaml11(i, hold))
                .collect(),
        ),
        Value::Mapping(m) => Value::Mapping(
            m.into_iter()
                .map(|(k, v)| (quote_for_yaml11(k, hold), quote_for_yaml11(v, hold)))
                .collect(),
        ),
        Value::Tagged(t) => {
            let t = *t;
            Value::Tagged(Box::new(serde_yaml::value::TaggedValue {
                tag: t.tag,
                value: quote_for_yaml11(t.value, hold),
            }))
        }
        other => other,
    }
}

/// `roles:` from v1's per-role resources, `<mode>_environment` and `<engine>_config.<mode>`;
/// the role counts leave `resources`.
fn v1_roles(
    parsed: &Recipe,
    backend: &Mapping,
    engine_type: &str,
    mut resources: Option<&mut Mapping>,
) -> Mapping {
    // srtctl's default engine's section for a name it does not know (its loader refuses it).
    let flags_key = crate::engine::kind(engine_type)
        .unwrap_or(&crate::engine::sglang::Sglang)
        .flags_section();
    let mut roles = Mapping::new();
    for role in Role::ALL {
        let (mode, name) = (role.as_str(), role.short());
        let mut r = Mapping::new();
        if let Some(res) = resources.as_deref_mut() {
            for (from, to) in [
                (format!("{name}_nodes"), "nodes"),
                (format!("{name}_workers"), "workers"),
                (format!("gpus_per_{name}"), "gpus"),
            ] {
                if let Some(v) = res.remove(from.as_str()) {
                    r.insert(key(to), v);
                }
            }
        }
        if let Some(env) = backend.get(format!("{mode}_environment").as_str()) {
            if !env.is_null() {
                r.insert(key("env"), env.clone());
            }
        }
        if let Some(args) = backend
            .get(flags_key)
            .and_then(|c| c.get(mode).or_else(|| c.get(name)))
        {
            if !args.is_null() {
                r.insert(key("args"), args.clone());
            }
        }
        // A role with only mcsup.workers is present too: 2.0 plans only declared roles.
        let has_workers = parsed
            .mcsup
            .as_ref()
            .is_some_and(|m| m.workers.for_role(role).is_some());
        if !r.is_empty() || has_workers {
            roles.insert(key(name), Value::Mapping(r));
        }
    }

    roles
}

/// kv_events_config → roles.<role>.kv_events: `true` (prefill and decode, as the v1 backend
/// reads it) or per mode.
fn kv_events_to_roles(backend: &Mapping, roles: &mut Mapping) {
    if let Some(kv) = backend.get("kv_events_config").filter(|v| !v.is_null()) {
        for role in Role::ALL {
            let name = role.short();
            let value = match kv {
                Value::Bool(true) if role != Role::Aggregated => Some(Value::Bool(true)),
                Value::Mapping(m) => m.get(role.as_str()).or_else(|| m.get(name)).cloned(),
                _ => None,
            };
            if let (Some(v), Some(r)) = (value, roles.get_mut(name).and_then(Value::as_mapping_mut))
            {
                r.insert(key("kv_events"), v);
            }
        }
    }
}

/// The implied master as a `mooncake-master` service.
fn master_service(mk: &Mapping, parsed: &Recipe, notes: &mut Vec<String>) -> Value {
    let mut master = Mapping::new();
    master.insert(key("name"), key("mooncake-master"));
    master.insert(key("type"), key("mooncake-master"));
    if let Some(c) = mk.get("container").filter(|c| !c.is_null()) {
        master.insert(key("container"), c.clone());
    }
    let extra = mk
        .get("master_extra_args")
        .cloned()
        .unwrap_or(Value::Sequence(vec![]));
    if let Some(replaced) = mk.get("master_args").filter(|a| !a.is_null()) {
        // The seed's master_args replaced the tunables: 2.0 appends args after them, so the
        // whole argv becomes the command (mcsup's managed ports included).
        let mc = parsed.mcsup.clone().unwrap_or_default();
        let ports = [
            mc.master
                .rpc_port
                .map_or(mooncake::DEFAULT_RPC_PORT, |p| p.0),
            mc.master
                .metadata_port
                .map_or(mooncake::DEFAULT_METADATA_PORT, |p| p.0),
            mc.master
                .metrics_port
                .map_or(mooncake::DEFAULT_METRICS_PORT, |p| p.0),
        ];
        let mut argv: Vec<Value> =
            mooncake::master_argv(mc.master.command.as_ref().map(|c| &c.0[..]), ports)
                .into_iter()
                .map(Value::String)
                .collect();
        argv.extend(replaced.as_sequence().cloned().unwrap_or_default());
        argv.extend(extra.as_sequence().cloned().unwrap_or_default());
        master.insert(key("command"), Value::Sequence(argv));
        notes.push("mooncake_kv_store.master_args replaced the master's tunables; 2.0 appends args after them, so the master's whole argv is its `command`".into());
    } else if extra.as_sequence().is_some_and(|s| !s.is_empty()) {
        master.insert(key("args"), extra);
    }
    if let Some(sc) = mk.get("store_config").filter(|c| !c.is_null()) {
        let mut o = Mapping::new();
        o.insert(key("store_config"), sc.clone());
        master.insert(key("options"), Value::Mapping(o));
    }
    Value::Mapping(master)
}

/// The shared worker env goes into every role (srtctl: "Mooncake values win").
fn env_into_roles(env: &Mapping, roles: &mut Mapping) {
    for (_, r) in roles.iter_mut() {
        let Some(r) = r.as_mapping_mut() else {
            continue;
        };
        let role_env = r
            .entry(key("env"))
            .or_insert_with(|| Value::Mapping(Mapping::new()));
        if let Some(m) = role_env.as_mapping_mut() {
            for (k, v) in env {
                m.insert(k.clone(), v.clone());
            }
        }
    }
}

/// srtctl's `_fold_engine`: what is left of `backend` rides on the engine mapping;
/// kv_events_config moves to the roles.
fn engine_value(backend: &Mapping, engine_type: &str, leftover: Mapping) -> Value {
    let mut rest = Mapping::new();
    for (bk, bv) in backend.iter() {
        let Some(name) = bk.as_str() else { continue };
        if recipe::BACKEND_KEYS.contains(&name)
            || name == "trtllm_config"
            || name == "kv_events_config"
        {
            continue;
        }
        rest.insert(bk.clone(), bv.clone());
    }
    if !leftover.is_empty() {
        rest.insert(key("mooncake_kv_store"), Value::Mapping(leftover));
    }
    if rest.is_empty() {
        key(engine_type)
    } else {
        let mut e = Mapping::new();
        e.insert(key("type"), key(engine_type));
        for (rk, rv) in rest {
            e.insert(rk, rv);
        }
        Value::Mapping(e)
    }
}

/// The seed's `standalone:` block as `mooncake-store` services.
fn store_services(sa: &Mapping, roles: &Mapping, notes: &mut Vec<String>) -> Vec<Value> {
    if sa.get("enabled").and_then(Value::as_bool) == Some(false) {
        notes.push("standalone.enabled is false: no store services".into());
        return Vec::new();
    }
    let placements = sa
        .get("placements")
        .and_then(Value::as_mapping)
        .cloned()
        .unwrap_or_default();
    let mut placed: Vec<(Role, Mapping)> = Vec::new();
    for role in Role::ALL {
        let p = placements
            .get(role.as_str())
            .or_else(|| placements.get(role.short()))
            .and_then(Value::as_mapping);
        if let Some(p) = p {
            if p.get("enabled").and_then(Value::as_bool) != Some(false) {
                placed.push((role, p.clone()));
            }
        }
    }
    let words = |m: &Mapping, k: &str| {
        m.get(k)
            .and_then(Value::as_sequence)
            .cloned()
            .unwrap_or_default()
    };
    let env_of = |m: &Mapping| {
        m.get("env")
            .and_then(Value::as_mapping)
            .cloned()
            .unwrap_or_default()
    };
    let identical = placed.windows(2).all(|w| {
        env_of(&w[0].1) == env_of(&w[1].1) && words(&w[0].1, "args") == words(&w[1].1, "args")
    });
    let covers_all_roles = roles
        .keys()
        .filter_map(Value::as_str)
        .all(|r| placed.iter().any(|(p, _)| p.short() == r));
    let groups: Vec<(String, String, Mapping)> = if placed.len() > 1
        && identical
        && covers_all_roles
    {
        notes.push("identical standalone placements for every role: one store service on `placement.node: workers` (the seed merged co-located identical roles)".into());
        vec![("store".into(), "workers".into(), placed[0].1.clone())]
    } else {
        placed
            .iter()
            .map(|(r, p)| {
                (
                    format!("store-{}", r.short()),
                    r.short().to_string(),
                    p.clone(),
                )
            })
            .collect()
    };
    let default_cmd: Vec<Value> = mooncake::STORE_COMMAND.iter().map(|w| key(w)).collect();
    groups
        .into_iter()
        .map(|(name, node, p)| {
            let mut s = Mapping::new();
            s.insert(key("name"), key(&name));
            s.insert(key("type"), key("mooncake-store"));
            let mut placement = Mapping::new();
            placement.insert(key("node"), key(&node));
            s.insert(key("placement"), Value::Mapping(placement));
            if let Some(cmd) = sa.get("command").and_then(Value::as_sequence) {
                if *cmd != default_cmd {
                    s.insert(key("command"), Value::Sequence(cmd.clone()));
                }
            }
            let mut args = words(sa, "args");
            args.extend(words(&p, "args"));
            if !args.is_empty() {
                s.insert(key("args"), Value::Sequence(args));
            }
            let mut env = env_of(sa);
            for (k, v) in env_of(&p) {
                env.insert(k, v);
            }
            if !env.is_empty() {
                s.insert(key("env"), Value::Mapping(env));
            }
            for k in [
                "preamble",
                "cpus_per_task",
                "cpu_bind",
                "srun_options",
                "critical",
            ] {
                if let Some(v) = sa.get(k).filter(|v| !v.is_null()) {
                    s.insert(key(k), v.clone());
                }
            }
            // The seed's health check defaults to TCP 8080 for 120 s and `null` disables it;
            // 2.0 has no implicit store probe, so write it out.
            match sa.get("health_check") {
                Some(Value::Null) => {}
                hc => {
                    let hc = hc.and_then(Value::as_mapping);
                    let mut r = Mapping::new();
                    r.insert(
                        key("port"),
                        hc.and_then(|h| h.get("port"))
                            .cloned()
                            .unwrap_or(Value::Number(8080.into())),
                    );
                    r.insert(
                        key("timeout_seconds"),
                        hc.and_then(|h| h.get("timeout_seconds"))
                            .cloned()
                            .unwrap_or(Value::Number(120.into())),
                    );
                    s.insert(key("readiness"), Value::Mapping(r));
                }
            }
            Value::Mapping(s)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PyYAML 6.0.3's answers (`yaml.safe_load("v: X")["v"]`) for each form, but the last:
    /// PyYAML reads an integer beyond 64 bits, serde_yaml's value cannot hold one (it stays its
    /// text, and is written quoted).
    #[test]
    fn plain_scalars_are_typed_as_yaml_1_1_types_them() {
        let int = |n: i64| Value::Number(n.into());
        for (text, want) in [
            ("0b101", int(5)),
            ("0x1f", int(31)),
            ("017", int(15)),
            ("-1_000", int(-1000)),
            ("+12:00:00", int(43200)),
            ("0", int(0)),
            ("Off", Value::Bool(false)),
            ("YES", Value::Bool(true)),
            ("~", Value::Null),
            ("1.5e+3", Value::Number(1500.0.into())),
            ("0o17", Value::String("0o17".into())),
            ("1e3", Value::String("1e3".into())),
            ("2024-01-01", Value::String("2024-01-01".into())),
            (
                "99999999999999999999",
                Value::String("99999999999999999999".into()),
            ),
        ] {
            assert_eq!(yaml11_scalar(text), want, "{text}");
        }
        assert!(
            matches!(yaml11_scalar(".inf"), Value::Number(n) if n.as_f64() == Some(f64::INFINITY))
        );
        for s in [
            "yes",
            "12:00:00",
            "1_000",
            "2024-01-01",
            "<<",
            "",
            "0x10",
            "1.5e+3",
        ] {
            assert!(yaml11_retypes(s), "{s}");
        }
        for s in ["100gb", "0o17", "1e3", "mlx5_0,mlx5_1", "04:00:00x"] {
            assert!(!yaml11_retypes(s), "{s}");
        }
    }
}
