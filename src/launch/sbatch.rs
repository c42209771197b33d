//! The `#SBATCH` set of a recipe, as srtctl derives it: `generate_minimal_sbatch_script`
//! (`src/srtctl/cli/submit.py`) and its template `templates/job_script_minimal.j2`, at
//! NVIDIA/srt-slurm c88ef731, with the cluster config applied as `resolve_config_with_defaults`
//! (`core/config.py`) applies it. tests/render_sbatch.rs holds the result against srtctl's own
//! output for every v1 fixture. Pure.

use std::path::Path;

use super::cluster::{pairs, ClusterConfig};
use crate::domain::{plan_err, PlanError, Role};
use crate::recipe::Recipe;

/// One `#SBATCH --key[=value]` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    pub key: String,
    /// `None`: a bare flag (`--exclusive`; srtctl writes one for an empty value).
    pub value: Option<String>,
}

impl Directive {
    fn new(key: &str, value: impl ToString) -> Self {
        Directive {
            key: key.into(),
            value: Some(value.to_string()),
        }
    }

    fn flag(key: &str) -> Self {
        Directive {
            key: key.into(),
            value: None,
        }
    }

    /// srtctl's `key: value` of `sbatch_directives` / `srun_options`: an empty value is a bare
    /// flag.
    fn from_pair(key: &str, value: String) -> Self {
        if value.is_empty() {
            Directive::flag(key)
        } else {
            Directive::new(key, value)
        }
    }

    /// `--key=value`, or `--key`.
    pub fn option(&self) -> String {
        match &self.value {
            Some(v) => format!("--{}={v}", self.key),
            None => format!("--{}", self.key),
        }
    }

    /// `#SBATCH --key=value`.
    pub fn line(&self) -> String {
        format!("#SBATCH {}", self.option())
    }
}

/// What the batch script asks Slurm for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// The job's node count: worker nodes, pools and dedicated nodes.
    pub nodes: usize,
    /// srtctl's directives, in its order.
    pub directives: Vec<Directive>,
}

/// Environment srtctl reads while rendering (`RUNNER_NAME`, `SLURM_ACCOUNT`, `SLURM_PARTITION`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenderEnv {
    pub runner_name: Option<String>,
    pub slurm_account: Option<String>,
    pub slurm_partition: Option<String>,
    /// `INFMAX_WORKSPACE`: srtctl mounts it at `/infmax-workspace` (lm-eval's harness).
    pub infmax_workspace: Option<String>,
}

impl RenderEnv {
    pub fn from_env() -> Self {
        let var = |k| std::env::var(k).ok().filter(|v: &String| !v.is_empty());
        RenderEnv {
            runner_name: var("RUNNER_NAME"),
            slurm_account: var("SLURM_ACCOUNT"),
            slurm_partition: var("SLURM_PARTITION"),
            infmax_workspace: var("INFMAX_WORKSPACE"),
        }
    }
}

/// srtctl's `#SBATCH` set for `recipe` on the cluster `cluster`; the job's output goes under
/// `output_base` (`<base>/<job id>/logs/sweep_<job id>.log`).
pub fn allocation(
    recipe: &Recipe,
    cluster: &ClusterConfig,
    env: &RenderEnv,
    output_base: &Path,
) -> Result<Allocation, PlanError> {
    let name = match recipe.raw_get(&["name"]) {
        Some(serde_yaml::Value::String(s)) if !s.is_empty() => s.clone(),
        _ => {
            return Err(plan_err(
                "name",
                "the recipe has no name (srtctl requires one: it names the Slurm job)",
                "add name: my-job at the top of the recipe",
            ))
        }
    };
    refuse_het_job(recipe, cluster)?;
    let slurm = |k: &str| string_at(recipe, &["slurm", k]);
    let gpus_per_node = count(recipe, &["resources", "gpus_per_node"])?.unwrap_or(4);
    let nodes = total_nodes(recipe)?;
    let trtllm = crate::engine::of_recipe(recipe)?.steps_from_host();
    let mut d = vec![
        Directive::new("job-name", env.runner_name.clone().unwrap_or(name)),
        Directive::new(
            "output",
            format!("{}/%j/logs/sweep_%j.log", output_base.display()),
        ),
        Directive::new("nodes", nodes),
    ];
    if trtllm {
        d.push(Directive::new("ntasks", gpus_per_node * nodes));
        d.push(Directive::new("ntasks-per-node", gpus_per_node));
    } else {
        d.push(Directive::new("ntasks", nodes));
        d.push(Directive::new("ntasks-per-node", 1));
    }
    if cluster.use_gpus_per_node_directive {
        d.push(Directive::new("gpus-per-node", gpus_per_node));
    }
    if cluster.use_segment_sbatch_directive {
        d.push(Directive::new("segment", nodes));
    }
    if cluster.use_exclusive_sbatch_directive {
        d.push(Directive::flag("exclusive"));
    }
    // Recipe, then the cluster's default, then (account and partition) the environment.
    let account = slurm("account")?
        .or(cluster.default_account.clone())
        .or(env.slurm_account.clone())
        .unwrap_or_else(|| "default".into());
    let time = slurm("time_limit")?
        .or(cluster.default_time_limit.clone())
        .unwrap_or_else(|| "01:00:00".into());
    let partition = slurm("partition")?
        .or(cluster.default_partition.clone())
        .or(env.slurm_partition.clone())
        .unwrap_or_else(|| "default".into());
    d.push(Directive::new("account", account));
    d.push(Directive::new("time", time));
    d.push(Directive::new("partition", partition));
    let mut extra = string_map(recipe, "sbatch_directives", "mem: \"0\"")?;
    for (k, v) in pairs(&cluster.default_sbatch_directives) {
        if !extra.iter().any(|(key, _)| *key == k) {
            extra.push((k, v));
        }
    }
    d.extend(extra.into_iter().map(|(k, v)| Directive::from_pair(&k, v)));
    for x in &d {
        if !directive_key_ok(&x.key) {
            return Err(plan_err(
                "sbatch_directives",
                format!("the key {:?} is not an sbatch option name: in a batch script it would end the #SBATCH line or start a command", x.key),
                "name the option as sbatch spells it, letters, digits and dashes only (e.g. mem-per-gpu)",
            ));
        }
        if let Some(v) = x
            .value
            .as_deref()
            .filter(|v| v.chars().any(char::is_control))
        {
            let from = match x.key.as_str() {
                "job-name" => "name".to_string(),
                "output" => "--output-dir".to_string(),
                "account" | "partition" => format!("slurm.{}", x.key),
                "time" => "slurm.time_limit".to_string(),
                k => format!("sbatch_directives.{k}"),
            };
            return Err(plan_err(
                from,
                format!("{v:?} has a line break or control character: in a batch script it would end the #SBATCH line and start a command"),
                "write the value on one line, without control characters",
            ));
        }
    }
    Ok(Allocation {
        nodes,
        directives: d,
    })
}

/// srtctl splits a disaggregated job into two Slurm components when asked (`het_jobs`); mcsup's
/// steps address one node list.
fn refuse_het_job(recipe: &Recipe, cluster: &ClusterConfig) -> Result<(), PlanError> {
    let asked = match recipe.raw_get(&["resources", "het_jobs"]) {
        Some(serde_yaml::Value::Bool(b)) => *b,
        _ => cluster.use_het_jobs,
    };
    if asked && disaggregated(recipe) {
        return Err(plan_err(
            "resources.het_jobs",
            "a heterogeneous Slurm job (prefill and decode as two components) is not something mcsup's batch script runs: its steps address one node list",
            "set resources.het_jobs: false in the recipe (it overrides the cluster's use_het_jobs)",
        ));
    }
    Ok(())
}

/// A role's `nodes` as the recipe gives it: v1 `resources.<role>_nodes`, 2.0 `roles.<role>.nodes`.
fn role_nodes(recipe: &Recipe, role: Role) -> Result<Option<usize>, PlanError> {
    if recipe.roles.is_some() {
        count(recipe, &["roles", role.short(), "nodes"])
    } else {
        count(recipe, &["resources", &format!("{}_nodes", role.short())])
    }
}

/// srtctl's `ResourceConfig.is_disaggregated`: prefill or decode nodes are given.
fn disaggregated(recipe: &Recipe) -> bool {
    [Role::Prefill, Role::Decode]
        .iter()
        .any(|r| role_nodes(recipe, *r).ok().flatten().is_some())
}

/// srtctl's node count: the engine roles' nodes (`SrtConfig.total_nodes`, vLLM's packing of
/// co-located prefill and decode included) plus the dedicated nodes (one shared one when
/// `benchmark.colocate_with_frontend`), as 2.0's `planned_total_nodes` counts them too.
pub fn total_nodes(recipe: &Recipe) -> Result<usize, PlanError> {
    let mut workers = if disaggregated(recipe) {
        role_nodes(recipe, Role::Prefill)?.unwrap_or(0)
            + role_nodes(recipe, Role::Decode)?.unwrap_or(0)
    } else {
        role_nodes(recipe, Role::Aggregated)?.unwrap_or(1)
    };
    if let Some(packed) = crate::engine::of_recipe(recipe)?.packed_nodes(recipe)? {
        workers = packed;
    }
    // 2.0 pools (`services[].nodes`) take nodes after the engine's; mcsup runs no pool, and a
    // node of one would find no role: refused rather than submitted to fail.
    if let Some(serde_yaml::Value::Sequence(s)) = recipe.raw_get(&["services"]) {
        if let Some((i, svc)) = s
            .iter()
            .enumerate()
            .find(|(_, svc)| svc.get("nodes").is_some())
        {
            let name = svc.get("name").and_then(|n| n.as_str()).unwrap_or("?");
            return Err(plan_err(
                format!("services[{i}].nodes"),
                format!("service `{name}` owns whole nodes (a pool); mcsup runs no pools, so those nodes would run nothing"),
                "run the pool's work as a service placed on the engine's nodes, or submit this recipe with srtctl",
            ));
        }
    }
    let job = crate::engine::job::JobSettings::from_recipe(recipe)?;
    let dedicated = [
        job.dedicated_infra_node,
        job.dedicated_frontend_node,
        job.dedicated_client_node,
    ]
    .iter()
    .filter(|d| **d)
    .count();
    let reserved = match (dedicated, job.client_with_frontend) {
        (0, _) => 0,
        (_, true) => 1,
        (n, false) => n,
    };
    Ok(workers + reserved)
}

/// A whole number at `path` (srtctl's `int` fields), or `None` when absent; 2.0's `nodes:
/// colocate` is 0 nodes of its own. The layout's reading of the same fields.
fn count(recipe: &Recipe, path: &[&str]) -> Result<Option<usize>, PlanError> {
    crate::engine::layout::num(recipe.raw_get(path), &path.join(".")).map(|n| n.map(|n| n as usize))
}

/// A string at `path` (srtctl's `str` fields), or `None` when absent.
fn string_at(recipe: &Recipe, path: &[&str]) -> Result<Option<String>, PlanError> {
    match recipe.raw_get(path) {
        None => Ok(None),
        Some(serde_yaml::Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(plan_err(
            path.join("."),
            format!("{v:?} is not a string"),
            "quote the value, e.g. time_limit: \"04:00:00\"",
        )),
    }
}

/// The recipe's `srun_options` as srtctl passes them to each srun: `--key=value`, or `--key`.
pub fn srun_options(recipe: &Recipe) -> Result<Vec<String>, PlanError> {
    Ok(string_map(recipe, "srun_options", "mpi: pmix")?
        .into_iter()
        .map(|(k, v)| Directive::from_pair(&k, v).option())
        .collect())
}

/// A mapping of strings to strings at the top-level `key`, in file order; `example` (one
/// `key: value`) goes into the fix.
/// Whether `key` can be an sbatch long option: letters, digits, `-` and `_`, starting with a
/// letter (what goes after `#SBATCH --`; anything else could end the line or start a command).
pub(crate) fn directive_key_ok(key: &str) -> bool {
    key.starts_with(|c: char| c.is_ascii_alphabetic())
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn string_map(
    recipe: &Recipe,
    key: &str,
    example: &str,
) -> Result<Vec<(String, String)>, PlanError> {
    let Some(v) = recipe.raw_get(&[key]) else {
        return Ok(Vec::new());
    };
    let bad = |what: String| {
        plan_err(
            key,
            what,
            format!("write {key}: {{{example}}} (strings, as srtctl's schema takes them)"),
        )
    };
    let map = v
        .as_mapping()
        .ok_or_else(|| bad(format!("{v:?} is not a mapping")))?;
    map.iter()
        .map(|(k, v)| match (k.as_str(), v.as_str()) {
            (Some(k), Some(v)) => Ok((k.to_string(), v.to_string())),
            _ => Err(bad(format!("{k:?}: {v:?} is not a string to a string"))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(yaml: &str, cluster: &str) -> Result<Allocation, PlanError> {
        let recipe = crate::recipe::parse_str(Path::new("r.yaml"), yaml).unwrap();
        let cluster = super::super::cluster::parse(Path::new("c.yaml"), cluster)
            .unwrap()
            .config;
        allocation(&recipe, &cluster, &RenderEnv::default(), Path::new("/OUT"))
    }

    fn lines(a: &Allocation) -> Vec<String> {
        a.directives.iter().map(Directive::line).collect()
    }

    #[test]
    fn trtllm_asks_for_one_task_per_gpu_as_srtctl_does() {
        let a = alloc(
            "name: t\nbackend: {type: trtllm}\nresources: {gpus_per_node: 8, agg_nodes: 2, agg_workers: 2}\n",
            "",
        )
        .unwrap();
        let l = lines(&a);
        assert!(l.contains(&"#SBATCH --ntasks=16".to_string()), "{l:?}");
        assert!(
            l.contains(&"#SBATCH --ntasks-per-node=8".to_string()),
            "{l:?}"
        );
    }

    #[test]
    fn dedicated_nodes_add_one_shared_node_or_one_each() {
        let base = "name: t\nresources: {prefill_nodes: 1, decode_nodes: 2, prefill_workers: 1, decode_workers: 2}\ninfra: {etcd_nats_dedicated_node: true}\nfrontend: {dedicated_node: true}\n";
        assert_eq!(alloc(base, "").unwrap().nodes, 4);
        let apart = format!(
            "{base}benchmark: {{colocate_with_frontend: false, client_dedicated_node: true}}\n"
        );
        assert_eq!(alloc(&apart, "").unwrap().nodes, 6);
    }

    #[test]
    fn a_recipe_without_a_name_or_asking_for_a_het_job_is_refused() {
        let e = alloc("resources: {agg_nodes: 1, agg_workers: 1}\n", "").unwrap_err();
        assert_eq!(e.key_path, "name");
        let het = "name: t\nresources: {prefill_nodes: 1, decode_nodes: 1, prefill_workers: 1, decode_workers: 1}\n";
        assert_eq!(
            alloc(het, "use_het_jobs: true\n").unwrap_err().key_path,
            "resources.het_jobs"
        );
        let off = format!(
            "{}  \n",
            het.replace("decode_workers: 1}", "decode_workers: 1, het_jobs: false}")
        );
        assert!(alloc(&off, "use_het_jobs: true\n").is_ok());
    }

    /// Round 4's M1: a key with a line break would end the `#SBATCH` line and start a command
    /// (and sbatch stops reading directives there, losing the early warning).
    #[test]
    fn a_directive_key_that_is_not_an_option_name_never_reaches_the_script() {
        let r = "name: t\nresources: {gpus_per_node: 8, agg_nodes: 1, agg_workers: 1}\n";
        let e = alloc(
            &format!("{r}sbatch_directives: {{\"x\\ntouch /tmp/PWN\\n#\": v}}\n"),
            "",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("sbatch_directives"), "{e}");
        assert!(e.contains("is not an sbatch option name"), "{e}");
        for bad in ["a b", "--x", "x=1", "x;y", "", "1x"] {
            assert!(!directive_key_ok(bad), "{bad:?}");
        }
        for good in ["mem", "mem-per-gpu", "gres", "comment", "x_y"] {
            assert!(directive_key_ok(good), "{good:?}");
        }
        // The cluster's defaults: refused where srtslurm.yaml is read, with its key.
        let e = super::super::cluster::parse(
            Path::new("srtslurm.yaml"),
            "default_sbatch_directives:\n  \"x\\ntouch /tmp/PWN\\n#\": v\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("srtslurm.yaml") && e.contains("default_sbatch_directives"),
            "{e}"
        );
        assert!(e.contains("is not an sbatch option name"), "{e}");
    }

    #[test]
    fn a_directive_value_that_is_not_a_string_names_its_key() {
        let e = alloc("name: t\nsbatch_directives: {mem: 0}\n", "").unwrap_err();
        assert_eq!(e.key_path, "sbatch_directives");
    }
}
