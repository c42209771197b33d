//! Before `sbatch`: what this cluster would refuse in a job's `#SBATCH` set, each with the
//! cluster-config key that fixes it, all in one message. On Slurm 22.05 a recipe that renders
//! fine fails `sbatch` three times in a row (`unrecognized option '--segment=1'`, `Invalid generic
//! resource (gres) specification`, `invalid partition specified: default`), each fixed by a key
//! the message does not name. The facts come from the cluster itself: `sbatch --help` (the
//! options this sbatch knows), `scontrol show partition` (its partitions, the default one),
//! `scontrol show node` (whether any node has GPUs as a GRES), and, where Slurm enforces
//! associations (`AccountingStorageEnforce` in `scontrol show config`), the accounts `sacctmgr`
//! lists for this user. A fact that cannot be read is not checked: `sbatch` then says what it
//! says.

use super::sbatch::Allocation;

/// What the cluster says about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// `sbatch --version` (`slurm 22.05.8`).
    pub version: Option<String>,
    /// `sbatch --help`.
    pub help: Option<String>,
    /// Its partitions, the default one (`Default=YES`) first.
    pub partitions: Option<Vec<String>>,
    /// Whether some node has GPUs as a generic resource.
    pub gpu_gres: Option<bool>,
    /// The accounts this user may charge, known only where Slurm enforces associations (without
    /// enforcement `sbatch` takes any account).
    pub accounts: Option<Vec<String>>,
}

impl Facts {
    /// Ask this machine's Slurm.
    pub fn read() -> Self {
        let run = |program: &str, args: &[&str]| super::submit::run(program, args).ok();
        let partitions = run("scontrol", &["show", "partition", "-o"]).map(|t| {
            let mut all: Vec<(bool, String)> = t
                .lines()
                .filter_map(|l| {
                    let name = field(l, "PartitionName")?;
                    Some((field(l, "Default").as_deref() != Some("YES"), name))
                })
                .collect();
            all.sort_by_key(|(not_default, _)| *not_default);
            all.into_iter().map(|(_, n)| n).collect()
        });
        let gpu_gres = run("scontrol", &["show", "node", "-o"]).map(|t| {
            t.lines()
                .filter_map(|l| field(l, "Gres"))
                .any(|g| g.contains("gpu"))
        });
        let enforced = run("scontrol", &["show", "config"]).is_some_and(|t| enforces_accounts(&t));
        let accounts = enforced
            .then(|| {
                let user = nix::unistd::User::from_uid(nix::unistd::getuid()).ok()??;
                let who = format!("user={}", user.name);
                let t = run(
                    "sacctmgr",
                    &["-n", "-P", "show", "assoc", &who, "format=account"],
                )?;
                let mut all: Vec<String> = Vec::new();
                for a in t.lines().map(str::trim).filter(|a| !a.is_empty()) {
                    if !all.iter().any(|k| k == a) {
                        all.push(a.to_string());
                    }
                }
                Some(all)
            })
            .flatten();
        Facts {
            version: run("sbatch", &["--version"]).map(|v| v.trim().to_string()),
            help: run("sbatch", &["--help"]),
            partitions,
            gpu_gres,
            accounts,
        }
    }
}

/// Whether `scontrol show config` says Slurm refuses a job whose account is not one of the
/// user's associations (`associations`, or `limits`/`qos`/`safe`, which imply it).
fn enforces_accounts(config: &str) -> bool {
    config.lines().any(|l| {
        let Some((key, value)) = l.split_once('=') else {
            return false;
        };
        key.trim() == "AccountingStorageEnforce"
            && value
                .split(',')
                .any(|v| matches!(v.trim(), "associations" | "limits" | "qos" | "safe"))
    })
}

/// `Key=value` of one `scontrol -o` line.
pub(crate) fn field(line: &str, key: &str) -> Option<String> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .map(str::to_string)
}

/// One thing the cluster would refuse: what, and the `key: value` that fixes it (and where).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub what: String,
    pub fix: String,
}

/// What `facts` say this cluster would refuse in `a`.
pub fn problems(a: &Allocation, facts: &Facts) -> Vec<Problem> {
    let mut out = Vec::new();
    let version = facts.version.as_deref().unwrap_or("this sbatch");
    for d in &a.directives {
        match d.key.as_str() {
            "partition" => {
                let (Some(p), Some(known)) = (&d.value, &facts.partitions) else {
                    continue;
                };
                if !known.is_empty() && !known.contains(p) {
                    out.push(Problem {
                        what: format!(
                            "partition `{p}` is not one of this cluster's ({})",
                            known.join(", ")
                        ),
                        fix: format!(
                            "default_partition: {} (or slurm.partition in the recipe)",
                            known[0]
                        ),
                    });
                }
                continue;
            }
            "gpus-per-node" if facts.gpu_gres == Some(false) => {
                out.push(Problem {
                    what: "no node of this cluster has GPUs as a generic resource (scontrol show node: no gpu in Gres), so sbatch refuses --gpus-per-node".into(),
                    fix: "use_gpus_per_node_directive: false".into(),
                });
                continue;
            }
            "account" => {
                let (Some(acct), Some(known)) = (&d.value, &facts.accounts) else {
                    continue;
                };
                if !known.contains(acct) {
                    out.push(Problem {
                        what: if known.is_empty() {
                            format!("account `{acct}`: this user has no Slurm account (sacctmgr show assoc lists none), and this cluster enforces associations")
                        } else {
                            format!(
                                "account `{acct}` is not one of this user's ({}), and this cluster enforces associations",
                                known.join(", ")
                            )
                        },
                        fix: match known.first() {
                            Some(a) => format!("default_account: {a} (or slurm.account in the recipe)"),
                            None => "an account your site's Slurm administrators add for you (sacctmgr add user), as default_account or slurm.account".into(),
                        },
                    });
                }
                continue;
            }
            // As old as sbatch itself.
            "job-name" | "output" | "nodes" | "ntasks" | "ntasks-per-node" | "time" => continue,
            _ => {}
        }
        let Some(help) = &facts.help else { continue };
        if !knows(help, &d.key) {
            let fix = match d.key.as_str() {
                "segment" => "use_segment_sbatch_directive: false".to_string(),
                "exclusive" => "use_exclusive_sbatch_directive: false".to_string(),
                "gpus-per-node" => "use_gpus_per_node_directive: false".to_string(),
                k => format!(
                    "no `{k}` under default_sbatch_directives (or the recipe's sbatch_directives)"
                ),
            };
            out.push(Problem {
                what: format!("{version} has no --{} option", d.key),
                fix,
            });
        }
    }
    out
}

/// Whether `sbatch --help` lists the long option `--key`.
fn knows(help: &str, key: &str) -> bool {
    let needle = format!("--{key}");
    help.match_indices(&needle).any(|(i, _)| {
        help[i + needle.len()..]
            .chars()
            .next()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-'))
    })
}

/// The one message for every problem of every job: what, then each key to set, and where.
pub fn message(problems: &[Problem], cluster: Option<&std::path::Path>) -> String {
    let mut fixes: Vec<&str> = Vec::new();
    for p in problems {
        if !fixes.contains(&p.fix.as_str()) {
            fixes.push(&p.fix);
        }
    }
    let whats: Vec<String> = {
        let mut w: Vec<String> = Vec::new();
        for p in problems {
            if !w.contains(&p.what) {
                w.push(p.what.clone());
            }
        }
        w
    };
    let file = cluster.map_or_else(
        || {
            "a srtslurm.yaml (none was found: in the working directory, or SRTSLURM_CONFIG)"
                .to_string()
        },
        |p| p.display().to_string(),
    );
    format!(
        "this cluster would refuse the job; nothing was submitted:\n{}\n  fix: set in {file}:\n{}",
        whats
            .iter()
            .map(|w| format!("  - {w}"))
            .collect::<Vec<_>>()
            .join("\n"),
        fixes
            .iter()
            .map(|f| format!("    {f}"))
            .collect::<Vec<_>>()
            .join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::sbatch::Directive;

    fn alloc(lines: &[(&str, Option<&str>)]) -> Allocation {
        Allocation {
            nodes: 1,
            directives: lines
                .iter()
                .map(|(k, v)| Directive {
                    key: k.to_string(),
                    value: v.map(str::to_string),
                })
                .collect(),
        }
    }

    #[test]
    fn slurm_22_05_refuses_the_segment_gres_and_an_unknown_partition_with_their_keys() {
        // Slurm 22.05.8's sbatch --help lists --gpus-per-node, --exclusive and --mem, not --segment.
        let facts = Facts {
            version: Some("slurm 22.05.8".into()),
            help: Some("      --exclusive[=user|mcs] allocate nodes in exclusive mode\n      --gpus-per-node=n       number of GPUs required per allocated node\n      --mem=MB                minimum amount of real memory\n      --mem-per-cpu=MB\n".into()),
            partitions: Some(vec!["debug".into(), "big".into()]),
            gpu_gres: Some(false),
            accounts: None,
        };
        let a = alloc(&[
            ("job-name", Some("x")),
            ("gpus-per-node", Some("4")),
            ("segment", Some("1")),
            ("exclusive", None),
            ("partition", Some("default")),
            ("mem", Some("0")),
            ("mem-bind", Some("local")),
        ]);
        let p = problems(&a, &facts);
        let fixes: Vec<&str> = p.iter().map(|p| p.fix.as_str()).collect();
        assert_eq!(
            fixes,
            [
                "use_gpus_per_node_directive: false",
                "use_segment_sbatch_directive: false",
                "default_partition: debug (or slurm.partition in the recipe)",
                "no `mem-bind` under default_sbatch_directives (or the recipe's sbatch_directives)",
            ]
        );
        assert_eq!(p[1].what, "slurm 22.05.8 has no --segment option");
        let m = message(&p, None);
        assert!(
            m.starts_with("this cluster would refuse the job; nothing was submitted:\n  - no node"),
            "{m}"
        );
        // Nothing known, nothing said.
        assert!(problems(&a, &Facts::default()).is_empty());
    }

    #[test]
    fn an_account_the_user_has_no_association_for_is_named_where_slurm_enforces_them() {
        let a = alloc(&[("job-name", Some("x")), ("account", Some("restricted"))]);
        let facts = |accounts: Option<Vec<&str>>| Facts {
            accounts: accounts.map(|v| v.into_iter().map(String::from).collect()),
            ..Facts::default()
        };
        let p = problems(&a, &facts(Some(vec!["research", "ops"])));
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(
            p[0].what,
            "account `restricted` is not one of this user's (research, ops), and this cluster enforces associations"
        );
        assert_eq!(
            p[0].fix,
            "default_account: research (or slurm.account in the recipe)"
        );
        assert!(problems(&a, &facts(Some(vec!["restricted", "ops"]))).is_empty());
        let none = problems(&a, &facts(Some(vec![])));
        assert!(none[0].what.contains("has no Slurm account"), "{none:?}");
        // Not enforced (or sacctmgr unreadable): not checked.
        assert!(problems(&a, &facts(None)).is_empty());
        // Enforcement as scontrol show config prints it.
        assert!(enforces_accounts(
            "AccountingStorageBackupHost = (null)\nAccountingStorageEnforce = associations,limits\n"
        ));
        assert!(enforces_accounts("AccountingStorageEnforce = safe\n"));
        assert!(!enforces_accounts("AccountingStorageEnforce = none\n"));
        assert!(!enforces_accounts(
            "AccountingStorageType = accounting_storage/none\n"
        ));
    }

    #[test]
    fn scontrol_lines_are_read_by_key() {
        let l = "PartitionName=debug AllowGroups=ALL Default=YES QoS=N/A";
        assert_eq!(field(l, "PartitionName").as_deref(), Some("debug"));
        assert_eq!(field(l, "Default").as_deref(), Some("YES"));
        assert_eq!(field(l, "Gres"), None);
    }
}
