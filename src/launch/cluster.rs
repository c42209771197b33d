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
    let found = cwd
        .ancestors()
        .take(3)
        .map(|d| d.join("srtslurm.yaml"))
        .find(|p| p.exists());
    if let Some(p) = &found {
        planted_by_another(p)?;
    }
    Ok(found)
}

/// A cluster config found by the search, not named by the user, decides the job's account,
/// container image, mounts and mail address: one that another user owns or could write (or put
/// there: a directory others can write without the sticky bit) is refused, never used silently.
/// Named with `--cluster-config` or `SRTSLURM_CONFIG`, the same file is the user's choice.
fn planted_by_another(path: &Path) -> Result<(), Diagnostic> {
    use std::os::unix::fs::MetadataExt;
    let refuse = |why: String| {
        Diagnostic::new(
            "",
            format!("was found by searching the working directory and its two parents, but {why}: another user could have put it there, and it would decide the job's account, image and mounts"),
            format!(
                "if you trust it, name it: --cluster-config {p} (or SRTSLURM_CONFIG={p}); else remove it, or make it yours and writable by you alone (chmod go-w)",
                p = path.display()
            ),
        )
        .in_file(path, None)
    };
    let me = nix::unistd::geteuid().as_raw();
    let not_mine = |uid: u32| uid != me && uid != 0;
    let stat = |p: &Path, follow: bool| {
        if follow {
            std::fs::metadata(p)
        } else {
            std::fs::symlink_metadata(p)
        }
        .map_err(|e| refuse(format!("cannot be checked ({e})")))
    };
    let link = stat(path, false)?;
    if link.file_type().is_symlink() && not_mine(link.uid()) {
        return Err(refuse(format!("it is a link owned by uid {}", link.uid())));
    }
    let file = stat(path, true)?;
    if not_mine(file.uid()) {
        return Err(refuse(format!(
            "it is owned by uid {} (you are uid {me})",
            file.uid()
        )));
    }
    if crate::domain::writable_by_others(&file) {
        return Err(refuse(format!(
            "others can write it (mode {:o})",
            file.mode() & 0o777
        )));
    }
    let dir = path.parent().unwrap_or(Path::new("/"));
    let d = stat(dir, true)?;
    let sticky = d.mode() & 0o1000 != 0;
    if not_mine(d.uid()) && d.mode() & 0o022 != 0 {
        return Err(refuse(format!(
            "its directory {} belongs to uid {} and others can write in it (mode {:o})",
            dir.display(),
            d.uid(),
            d.mode() & 0o7777
        )));
    }
    if !sticky && crate::domain::writable_by_others(&d) {
        return Err(refuse(format!(
            "others can replace it: its directory {} is writable by others without the sticky bit (mode {:o})",
            dir.display(),
            d.mode() & 0o7777
        )));
    }
    Ok(())
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
            let k = k.as_str().unwrap_or_default();
            if key == "default_sbatch_directives" && !super::sbatch::directive_key_ok(k) {
                let at = KeyIndex::build(text).find(key);
                return Err(Diagnostic::new(
                    key,
                    format!("the key {k:?} is not an sbatch option name: in a batch script it would end the #SBATCH line or start a command"),
                    "name the option as sbatch spells it, letters, digits and dashes only (e.g. mem-per-gpu)",
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

    /// Round 4's H1: a cluster config another user put where the search looks (a shared
    /// directory above the working directory) is refused, and named; named by the user, it is
    /// taken.
    #[test]
    fn a_cluster_config_another_user_could_have_planted_is_refused_when_found_by_search() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let top = d.path().join("shared");
        let cwd = top.join("a/b");
        std::fs::create_dir_all(&cwd).unwrap();
        let cfg = top.join("srtslurm.yaml");
        std::fs::write(&cfg, "default_account: attacker-acct\n").unwrap();
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(&top, 0o755);
        mode(&cfg, 0o644);
        assert_eq!(
            find(None, None, &cwd).unwrap(),
            Some(cfg.clone()),
            "mine: taken"
        );
        // Writable by others.
        mode(&cfg, 0o666);
        let e = find(None, None, &cwd).unwrap_err().to_string();
        assert!(e.contains("others can write it (mode 666)"), "{e}");
        assert!(
            e.contains(&format!("--cluster-config {}", cfg.display())),
            "{e}"
        );
        mode(&cfg, 0o644);
        // In a directory anyone can write, without the sticky bit; with it, fine.
        mode(&top, 0o777);
        let e = find(None, None, &cwd).unwrap_err().to_string();
        assert!(e.contains("without the sticky bit"), "{e}");
        mode(&top, 0o1777);
        assert!(find(None, None, &cwd).is_ok());
        // Named explicitly, the user's choice.
        mode(&top, 0o777);
        assert_eq!(find(Some(&cfg), None, &cwd).unwrap(), Some(cfg.clone()));
        assert!(find(None, Some(cfg.to_str().unwrap()), &cwd).is_ok());
        mode(&top, 0o1777);
        // Another user's file (the suite runs as root, as CI does; elsewhere this part needs it).
        if nix::unistd::geteuid().is_root() {
            let other = Some(nix::unistd::Uid::from_raw(1000));
            nix::unistd::chown(&cfg, other, None).unwrap();
            let e = find(None, None, &cwd).unwrap_err().to_string();
            assert!(e.contains("it is owned by uid 1000"), "{e}");
            assert!(e.contains("was found by searching"), "{e}");
            nix::unistd::chown(&cfg, Some(nix::unistd::Uid::from_raw(0)), None).unwrap();
            nix::unistd::chown(&top, other, None).unwrap();
            let e = find(None, None, &cwd).unwrap_err().to_string();
            assert!(
                e.contains("belongs to uid 1000 and others can write in it"),
                "{e}"
            );
        } else {
            assert!(
                std::env::var_os("CI").is_none(),
                "the chown cases need root under CI"
            );
        }
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
