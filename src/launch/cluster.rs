//! srt-slurm's cluster config, `srtslurm.yaml`: the settings of one cluster that recipes leave
//! out (account, partition, time limit, which `#SBATCH` directives the cluster takes, model and
//! container aliases, mounts). Found as srtctl finds it (`core/config.py`
//! `find_cluster_config_path` @c88ef731): `SRTSLURM_CONFIG`, else `srtslurm.yaml` in the working
//! directory or one of its two parents.
//!
//! srtctl validates the file and, when it does not validate, warns and goes on without it, so a
//! typo silently changes the job's account or directives. mcsup says which key is wrong instead.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::domain::Diagnostic;
use crate::recipe::KeyIndex;

/// A cluster config is a few KiB; a bigger file is not one.
const MAX_CLUSTER_CONFIG_BYTES: u64 = 1 << 20;

/// The settings of `srtslurm.yaml` that change the batch script (srtctl's `ClusterConfig`).
/// Keys srtctl knows but the script does not need are accepted and not read.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    #[serde(default)]
    pub default_account: Option<String>,
    #[serde(default)]
    pub default_partition: Option<String>,
    #[serde(default)]
    pub default_time_limit: Option<String>,
    #[serde(default = "yes")]
    pub use_gpus_per_node_directive: bool,
    #[serde(default = "yes")]
    pub use_segment_sbatch_directive: bool,
    #[serde(default)]
    pub use_exclusive_sbatch_directive: bool,
    #[serde(default)]
    pub use_het_jobs: bool,
    /// Directives every job gets unless its recipe sets the same key.
    #[serde(default)]
    pub default_sbatch_directives: Option<serde_yaml::Mapping>,
    /// Where job outputs go (`$VARS` expanded), unless `--output-dir` says otherwise.
    #[serde(default)]
    pub output_dir: Option<String>,
    /// srt-slurm's checkout: its `configs/` (etcd, nats-server) is mounted at `/configs`.
    #[serde(default)]
    pub srtctl_root: Option<String>,
    #[serde(default)]
    pub model_paths: BTreeMap<String, String>,
    #[serde(default)]
    pub containers: BTreeMap<String, String>,
    /// Host path → container path, for every job of the cluster.
    #[serde(default)]
    pub default_mounts: Option<serde_yaml::Mapping>,
    // Known to srtctl, not needed for the batch script.
    #[serde(default)]
    cluster: Option<serde_yaml::Value>,
    #[serde(default)]
    gpus_per_node: Option<serde_yaml::Value>,
    #[serde(default)]
    network_interface: Option<serde_yaml::Value>,
    #[serde(default)]
    default_health_check: Option<serde_yaml::Value>,
    #[serde(default)]
    cloud: Option<serde_yaml::Value>,
    #[serde(default)]
    default_bash_preamble: Option<serde_yaml::Value>,
    #[serde(default)]
    reporting: Option<serde_yaml::Value>,
    #[serde(default)]
    telemetry: Option<serde_yaml::Value>,
    #[serde(default)]
    nginx_raise_ulimit: Option<serde_yaml::Value>,
}

fn yes() -> bool {
    true
}

impl Default for ClusterConfig {
    fn default() -> Self {
        serde_yaml::from_str("{}").expect("every field has a default")
    }
}

/// A cluster config and where it came from (`None`: no file, srtctl's defaults).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cluster {
    pub path: Option<PathBuf>,
    pub config: ClusterConfig,
}

/// Where srtctl would find `srtslurm.yaml`: `explicit` (mcsup's `--cluster-config`), else
/// `SRTSLURM_CONFIG` (which must exist: srtctl then looks nowhere else), else the working
/// directory and its two parents.
pub fn find(
    explicit: Option<&Path>,
    env_var: Option<&str>,
    cwd: &Path,
) -> Result<Option<PathBuf>, Diagnostic> {
    if let Some(p) = explicit {
        return Ok(Some(p.to_path_buf()));
    }
    if let Some(v) = env_var.filter(|v| !v.is_empty()) {
        let p = PathBuf::from(v);
        if !p.exists() {
            return Err(Diagnostic::new(
                "SRTSLURM_CONFIG",
                format!("names {v}, which does not exist"),
                "point SRTSLURM_CONFIG at the cluster's srtslurm.yaml, or unset it",
            ));
        }
        return Ok(Some(p));
    }
    Ok(cwd
        .ancestors()
        .take(3)
        .map(|d| d.join("srtslurm.yaml"))
        .find(|p| p.exists()))
}

/// Read and check the cluster config at `path`.
pub fn load(path: &Path) -> Result<Cluster, Diagnostic> {
    let bad = |msg: String, fix: &str| Diagnostic::new("", msg, fix).in_file(path, None);
    let file = crate::recipe::read_input_file(path, MAX_CLUSTER_CONFIG_BYTES).map_err(|e| {
        bad(
            format!("cannot read the cluster config: {e}"),
            "pass a readable srtslurm.yaml (--cluster-config, SRTSLURM_CONFIG)",
        )
    })?;
    let text = String::from_utf8(file.bytes)
        .map_err(|_| bad("is not UTF-8 text".into(), "save it as UTF-8 YAML"))?;
    parse(path, &text)
}

/// Parse cluster config text (`path` names it in errors).
pub fn parse(path: &Path, text: &str) -> Result<Cluster, Diagnostic> {
    let value: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| {
        Diagnostic::new(
            "",
            format!("is not YAML: {e}"),
            "fix the YAML syntax of srtslurm.yaml",
        )
        .in_file(path, None)
    })?;
    let value = if value.is_null() {
        serde_yaml::Value::Mapping(Default::default())
    } else {
        value
    };
    let config: ClusterConfig = serde_path_to_error::deserialize(value).map_err(|e| {
        let key = e.path().to_string();
        let at = KeyIndex::build(text).find(&key);
        let inner = e.into_inner().to_string();
        let fix = if inner.contains("unknown field") {
            "remove the key or correct its spelling (srtctl would ignore this whole file with only a warning)"
        } else {
            "give the value the type srt-slurm's ClusterConfig declares (see srtslurm.yaml.example)"
        };
        Diagnostic::new(key, inner, fix).in_file(path, at)
    })?;
    for (key, map) in [
        (
            "default_sbatch_directives",
            &config.default_sbatch_directives,
        ),
        ("default_mounts", &config.default_mounts),
    ] {
        for (k, v) in map.iter().flatten() {
            if !(k.is_string() && v.is_string()) {
                let at = KeyIndex::build(text).find(key);
                return Err(Diagnostic::new(
                    key,
                    format!("{k:?}: {v:?} is not a string to a string"),
                    "quote both sides, e.g. mem: \"0\"",
                )
                .in_file(path, at));
            }
        }
    }
    Ok(Cluster {
        path: Some(path.to_path_buf()),
        config,
    })
}

/// String pairs of a mapping checked by [`parse`], in file order.
pub fn pairs(map: &Option<serde_yaml::Mapping>) -> Vec<(String, String)> {
    map.iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.as_str()?.to_string())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_text(text: &str) -> Result<Cluster, String> {
        parse(Path::new("srtslurm.yaml"), text).map_err(|d| d.to_string())
    }

    #[test]
    fn defaults_are_srtctls() {
        let c = parse_text("").unwrap().config;
        assert!(c.use_gpus_per_node_directive && c.use_segment_sbatch_directive);
        assert!(!c.use_exclusive_sbatch_directive && !c.use_het_jobs);
        assert_eq!(c, ClusterConfig::default());
    }

    #[test]
    fn an_unknown_key_is_named_with_its_line() {
        let e = parse_text("default_account: a\ndefault_partiton: gpu\n").unwrap_err();
        assert!(
            e.starts_with("srtslurm.yaml:2:1: default_partiton: unknown field"),
            "{e}"
        );
        assert!(
            e.contains("fix: remove the key or correct its spelling"),
            "{e}"
        );
    }

    #[test]
    fn a_directive_that_is_not_a_string_is_refused() {
        let e = parse_text("default_sbatch_directives:\n  mem: 0\n").unwrap_err();
        assert!(e.contains("default_sbatch_directives: "), "{e}");
        assert!(e.contains("quote both sides"), "{e}");
    }

    #[test]
    fn srtslurm_config_must_exist_and_the_search_stops_two_levels_up() {
        let d = tempfile::tempdir().unwrap();
        let deep = d.path().join("a/b/c");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(d.path().join("srtslurm.yaml"), "").unwrap();
        assert_eq!(find(None, None, &deep).unwrap(), None);
        let found = find(None, None, &d.path().join("a/b")).unwrap();
        assert_eq!(found, Some(d.path().join("srtslurm.yaml")));
        let missing = d.path().join("nope.yaml");
        let e = find(None, Some(missing.to_str().unwrap()), &deep).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
    }
}
