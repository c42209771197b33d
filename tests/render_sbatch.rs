//! `mcsup render`'s batch script against srtctl's own: for every v1 fixture, the `#SBATCH` set,
//! the node count and the model/container aliases equal what srtctl's code produced
//! (tests/fixtures/srt-slurm-v1/<name>.sbatch.txt, captured by scripts/capture/srtctl_sbatch.py
//! at the commit its header names), with no cluster config and with
//! tests/fixtures/srtslurm/srtslurm.yaml. The whole script passes `bash -n` and shellcheck.

use crate::common;

use std::path::{Path, PathBuf};

use mcsup::launch::{self, cluster, sbatch, RenderEnv, RenderRequest};
use mcsup::recipe;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// `## cluster config: <name>` → the lines under it (MODEL, CONTAINER, #SBATCH ...).
fn captured(path: &Path) -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("## cluster config: ") {
            out.push((name.to_string(), Vec::new()));
        } else if !line.is_empty() && !line.starts_with("# ") {
            out.last_mut()
                .expect("a section first")
                .1
                .push(line.to_string());
        }
    }
    out
}

#[test]
fn every_v1_fixture_gets_srtctls_sbatch_set_nodes_and_aliases() {
    let dir = fixtures().join("srt-slurm-v1");
    let with_cluster = cluster::load(&fixtures().join("srtslurm/srtslurm.yaml")).unwrap();
    let mut checked = 0;
    let mut recipes: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    recipes.sort();
    for recipe_path in recipes {
        let capture = recipe_path.with_extension("sbatch.txt");
        assert!(
            capture.exists(),
            "{} has no capture of srtctl's output: run scripts/capture/srtctl_sbatch.py",
            recipe_path.display()
        );
        let recipe = mcsup::recipe::load_file(&recipe_path).unwrap();
        let sections = captured(&capture);
        assert_eq!(sections.len(), 2, "{}", capture.display());
        for (name, want) in sections {
            let cfg = match name.as_str() {
                "none" => cluster::ClusterConfig::default(),
                "srtslurm.yaml" => with_cluster.config.clone(),
                other => panic!("{}: unknown section {other}", capture.display()),
            };
            let a = sbatch::allocation(&recipe, &cfg, &RenderEnv::default(), Path::new("/OUT"))
                .unwrap_or_else(|e| panic!("{}: {e}", recipe_path.display()));
            let (model, container) = launch::aliases(&recipe, &cfg);
            let mut got = vec![
                format!("MODEL {model}"),
                format!("CONTAINER {}", container.unwrap_or_default()),
            ];
            got.extend(a.directives.iter().map(sbatch::Directive::line));
            assert_eq!(
                got,
                want,
                "{} with cluster config {name}",
                recipe_path.display()
            );
            let nodes = format!("#SBATCH --nodes={}", a.nodes);
            assert!(want.contains(&nodes), "{}: {nodes}", recipe_path.display());
            checked += 1;
        }
    }
    assert_eq!(checked, 32, "16 fixtures x 2 cluster configs");
}

/// The srt-slurm 2.0 fixtures. srt-slurm 2.0's code is not runnable here (the local mirror has
/// no 2.0 commit; the search index holds parts of it), so these node counts are derived by hand
/// from its `planned_total_nodes` (`cli/submit.py`, index snapshot c11a87d8): the engine roles'
/// nodes (`nodes: colocate` is none of its own), plus one node for the dedicated roles
/// (`placement.node: dedicated` on etcd/nats, the frontend or the benchmark); 2.0's pools
/// (`services[].nodes`) are refused, as mcsup runs no pool.
#[test]
fn srt_slurm_2_fixtures_get_the_node_count_of_2_0s_planned_total_nodes() {
    let expected: &[(&str, Result<usize, &str>)] = &[
        ("docs-gms-log-readiness", Ok(1)),
        ("docs-mooncake-store-workers", Ok(2)),
        ("docs-services-standalone-stores", Ok(3)),
        // roles.agg.nodes 1, etcd and nats on a dedicated node.
        ("infra-services-dedicated", Ok(2)),
        ("pools", Err("services[0].nodes")),
        ("services-generic-http", Ok(1)),
        ("services-generic-port", Ok(1)),
        ("test-declared-mooncake-master", Ok(3)),
        ("test-etcd-external", Ok(3)),
        ("test-exporters-override", Ok(3)),
        ("test-mooncake-stores-backend-form-early", Ok(3)),
        ("test-mooncake-stores-engine-form", Ok(3)),
        ("torchrun-pool", Err("services[0].nodes")),
        // prefill on 1 node, decode `nodes: colocate`.
        ("trtllm-serve-disagg-mooncake", Ok(1)),
        ("trtllm-serve-mooncake-donor", Ok(2)),
    ];
    let dir = fixtures().join("srt-slurm-2");
    let on_disk = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "yaml")
        })
        .count();
    assert_eq!(
        on_disk,
        expected.len(),
        "a 2.0 fixture without an expected node count"
    );
    for (name, want) in expected {
        let recipe = mcsup::recipe::load_file(&dir.join(format!("{name}.yaml"))).unwrap();
        let got = sbatch::allocation(
            &recipe,
            &cluster::ClusterConfig::default(),
            &RenderEnv::default(),
            Path::new("/OUT"),
        );
        match (got, want) {
            (Ok(a), Ok(n)) => {
                assert_eq!(a.nodes, *n, "{name}");
                assert!(
                    a.directives
                        .iter()
                        .any(|d| d.line() == format!("#SBATCH --segment={n}")),
                    "{name}"
                );
            }
            (Err(e), Err(key)) => assert_eq!(e.key_path, *key, "{name}: {e}"),
            (got, want) => panic!("{name}: {got:?}, expected {want:?}"),
        }
    }
}

/// A render of `recipe` with the cluster config `config` from `cwd` (output under `cwd/out`),
/// the nodes' mcsup at /shared/bin/mcsup, in the recipe's container or not.
fn request(recipe: PathBuf, config: Option<PathBuf>, cwd: &Path, container: bool) -> RenderRequest {
    RenderRequest {
        recipe,
        cluster_config: config,
        srtslurm_env: None,
        output_dir: Some(cwd.join("out")),
        mcsup: PathBuf::from("/shared/bin/mcsup"),
        container,
        roles: Vec::new(),
        cwd: cwd.to_path_buf(),
        env: RenderEnv::default(),
    }
}

/// `mcsup render` of the 1P2D mocker fixture, in the recipe's container (a .sqsh file under
/// `cwd`, through the alias of a cluster config there) or without one.
fn rendered(container: bool, cwd: &Path) -> launch::Rendered {
    let image = cwd.join("dynamo-sglang.sqsh");
    std::fs::write(&image, "").unwrap();
    let config = cwd.join("srtslurm.yaml");
    std::fs::write(
        &config,
        format!(
            "containers: {{dynamo-sglang: {}}}\ndefault_mounts: {{/shared/hf-cache: /root/.cache/huggingface}}\n",
            image.display()
        ),
    )
    .unwrap();
    let req = request(
        fixtures().join("srt-slurm-v1/mocker-1p2d.yaml"),
        Some(config),
        cwd,
        container,
    );
    launch::render(&req).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_script_passes_bash_n_and_shellcheck_with_and_without_a_container() {
    let shellcheck = std::process::Command::new("shellcheck")
        .arg("--version")
        .output()
        .is_ok();
    common::require(
        shellcheck,
        "shellcheck",
        "apt-get install shellcheck (scripts/setup.sh does)",
    );
    let d = tempfile::tempdir().unwrap();
    for container in [true, false] {
        let r = rendered(container, d.path());
        assert_clean_shell(&d.path().join(format!("job-{container}.sh")), &r.script);
    }
}

/// `script`, written to `path`, passes `bash -n` and `shellcheck -S style`.
fn assert_clean_shell(path: &Path, script: &str) {
    std::fs::write(path, script).unwrap();
    for (tool, args) in [("bash", vec!["-n"]), ("shellcheck", vec!["-S", "style"])] {
        let o = std::process::Command::new(tool)
            .args(&args)
            .arg(path)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{tool} on {}:\n{}{}\n{script}",
            path.display(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
    }
}

#[test]
fn the_script_carries_the_recipe_the_container_and_every_nodes_roles() {
    let d = tempfile::tempdir().unwrap();
    let r = rendered(true, d.path());
    let recipe = std::fs::read_to_string(fixtures().join("srt-slurm-v1/mocker-1p2d.yaml")).unwrap();
    assert!(r
        .script
        .contains(&format!("<<'MCSUP_RECIPE_END'\n{recipe}")));
    let c = r.container.as_ref().unwrap();
    let image = d.path().join("dynamo-sglang.sqsh").display().to_string();
    assert_eq!(c.image, image);
    // hf: models are not mounted; the cluster's default mounts are.
    assert_eq!(
        c.mounts,
        vec![(
            "/shared/hf-cache".to_string(),
            "/root/.cache/huggingface".to_string()
        )]
    );
    assert!(r.script.contains(&format!("--container-image={image} ")));
    assert!(r.script.contains("$MCSUP:/opt/mcsup/bin/mcsup:ro"));
    assert_eq!(r.nodes.len(), 3);
    assert!(r.nodes[0].starts_with("prefill: "), "{:?}", r.nodes);
    assert!(r.nodes[1].starts_with("decode: ") && r.nodes[2].starts_with("decode: "));
    // The early warning covers the teardown deadline (default 25 s) and the margins.
    assert!(r.script.contains(&format!(
        "#SBATCH --signal=B:USR1@{}\n",
        r.early_warning.as_secs()
    )));
    assert!(
        r.early_warning.as_secs() >= 25 + 2 + 10,
        "{:?}",
        r.early_warning
    );
}

#[test]
fn a_missing_model_alias_names_the_alias_and_the_cluster_file() {
    let d = tempfile::tempdir().unwrap();
    let req = request(
        fixtures().join("srt-slurm-v1/mocker-kimi-trace-agg.yaml"),
        None,
        d.path(),
        true,
    );
    let e = launch::render(&req).unwrap_err().to_string();
    assert!(
        e.contains("model.path: `kimi-k25-nvfp4` is not an alias in the cluster config (no srtslurm.yaml found; model_paths: none)"),
        "{e}"
    );
    assert!(
        e.contains("fix: add the alias to model_paths in srtslurm.yaml"),
        "{e}"
    );
}

/// A TRT-LLM job (the upstream gb300 recipe of tests/fixtures/srt-slurm-v1/trtllm, its model and
/// container through a cluster config's aliases): mcsup runs on the host, not in the container
/// (TRT-LLM images have no Slurm client to start the endpoints' steps from), and is given the
/// recipe's container for its steps. The script passes bash -n and shellcheck, and the options
/// it gives each node's mcsup, expanded as bash expands them in the job, make `mcsup plan` put
/// every endpoint's step in that container with the model, the job's directory and the log
/// directory mounted.
#[test]
fn a_trtllm_job_runs_mcsup_on_the_host_and_its_steps_in_the_container() {
    common::require(
        std::process::Command::new("shellcheck")
            .arg("--version")
            .output()
            .is_ok(),
        "shellcheck",
        "apt-get install shellcheck (scripts/setup.sh does)",
    );
    let d = tempfile::tempdir().unwrap();
    let image = d.path().join("trtllm.sqsh");
    std::fs::write(&image, "").unwrap();
    let model = d.path().join("models/dsr1");
    std::fs::create_dir_all(&model).unwrap();
    let root = srtctl_checkout(d.path());
    let config = d.path().join("srtslurm.yaml");
    std::fs::write(
        &config,
        format!(
            "containers: {{dynamo-trtllm: {}}}\nmodel_paths: {{dsr1: {}}}\nsrtctl_root: {}\n",
            image.display(),
            model.display(),
            root.display()
        ),
    )
    .unwrap();
    let recipe = fixtures()
        .join("srt-slurm-v1/trtllm/gb300-fp4-1k1k-mtp-ctx1-gen1-dep4-batch768-eplb0-mtp1.yaml");
    let req = request(recipe.clone(), Some(config), d.path(), true);
    let r = launch::render(&req).unwrap_or_else(|e| panic!("{e}"));
    assert_clean_shell(&d.path().join("job.sh"), &r.script);
    assert!(r.script.contains("CONTAINER=()\n"), "{}", r.script);
    assert!(r.script.contains("STEP_MCSUP=\"$MCSUP\"\n"));
    assert!(!r.script.contains("/opt/mcsup/bin/mcsup:ro"));
    // The node's mcsup options, as bash expands them in the job (OUTPUT_DIR of job 77).
    let steps_in = r
        .script
        .lines()
        .skip_while(|l| !l.starts_with("STEPS_IN=("))
        .take_while(|l| !l.starts_with("STEP_") && !l.starts_with("SRUN"))
        .collect::<Vec<_>>()
        .join("\n");
    let o = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "OUTPUT_DIR=/o/77; LOG_DIR=/o/77/logs\n{steps_in}\nprintf '%s\\n' \"${{STEPS_IN[@]}}\""
        ))
        .output()
        .unwrap();
    let args: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(
        args,
        vec![
            format!("--step-container-image={}", image.display()),
            format!(
                "--step-container-mounts={m}:/model,{r}/configs:/configs,{r}/src/srtctl/runtime_scripts:/srtctl-runtime,{r}/src/srtctl/benchmarks/scripts:/srtctl-benchmarks,/o/77:/o/77,/o/77/logs:/logs",
                m = model.display(),
                r = root.display()
            ),
        ],
        "{steps_in}"
    );
    let plan = std::process::Command::new(common::MCSUP)
        .args([
            "plan",
            "--json",
            "--node",
            "node1",
            "--nodelist",
            "node[0-2]",
            "--recipe",
        ])
        .arg(&recipe)
        .args(&args)
        .output()
        .unwrap();
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let argv: Vec<&str> = plan["processes"][0]["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let mounts = format!(
        "{m}:/model,{r}/configs:/configs,{r}/src/srtctl/runtime_scripts:/srtctl-runtime,{r}/src/srtctl/benchmarks/scripts:/srtctl-benchmarks,/o/77:/o/77,/o/77/logs:/logs",
        m = model.display(),
        r = root.display()
    );
    let image = image.display().to_string();
    let container = [
        "--container-image",
        image.as_str(),
        "--no-container-entrypoint",
        "--no-container-mount-home",
        "--container-mounts",
        mounts.as_str(),
    ];
    assert!(
        argv.windows(container.len()).any(|w| w == container),
        "{argv:?}"
    );
    assert_eq!(argv[0], "srun");
    assert_eq!(
        plan["processes"][0]["slurm_step"]["name"],
        "mcsup.trtllm-prefill-0"
    );
}

/// A stand-in srt-slurm checkout under `dir`: the directories srtctl mounts into its steps.
fn srtctl_checkout(dir: &Path) -> PathBuf {
    let root = dir.join("srt-slurm");
    for sub in [
        "configs",
        "src/srtctl/runtime_scripts",
        "src/srtctl/benchmarks/scripts/sa-bench",
    ] {
        std::fs::create_dir_all(root.join(sub)).unwrap();
    }
    root
}

/// Issue 49: the benchmark's step sees srtctl's mounts. For captures of srtctl's benchmark
/// stage (tests/fixtures/srt-slurm-v1/benchmark), the container `mcsup render` gives the job
/// mounts what srtctl's runtime gives the benchmark step (its `container_mounts`: the log
/// directory at /logs, the model at /model, srt-slurm's configs, runtime scripts and benchmark
/// scripts), the capture's `/SRTCTL`, `/MODEL`, `/LOGS` being the checkout, the model and the
/// job's log directory. mcsup adds its own: the job's directory. Mount order aside (pyxis mounts
/// in order; none of these nest), the lists are equal.
#[test]
fn the_rendered_container_mounts_what_srtctls_benchmark_step_mounts() {
    for stem in ["dsr1-b200-1p3d", "mocker-agg", "dsv4-gb300-max-tpt-custom"] {
        let d = tempfile::tempdir().unwrap();
        let root = srtctl_checkout(d.path());
        let model = d.path().join("model");
        std::fs::create_dir_all(&model).unwrap();
        let image = d.path().join("image.sqsh");
        std::fs::write(&image, "").unwrap();
        let dir = fixtures().join("srt-slurm-v1/benchmark");
        let capture: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{stem}.srtctl.json"))).unwrap(),
        )
        .unwrap();
        let r = recipe::load_file(&dir.join(format!("{stem}.yaml"))).unwrap();
        let given = |k: &str| {
            r.raw_get(&["model", k])
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string()
        };
        let config = d.path().join("srtslurm.yaml");
        let models = if given("path").starts_with("hf:") {
            String::new()
        } else {
            format!(
                "model_paths: {{{:?}: {}}}\n",
                given("path"),
                model.display()
            )
        };
        std::fs::write(
            &config,
            format!(
                "srtctl_root: {}\ncontainers: {{{:?}: {}}}\n{models}",
                root.display(),
                given("container"),
                image.display(),
            ),
        )
        .unwrap();
        let req = request(
            dir.join(format!("{stem}.yaml")),
            Some(config),
            d.path(),
            true,
        );
        let out = launch::render(&req).unwrap_or_else(|e| panic!("{stem}: {e}"));
        let c = out.container.as_ref().unwrap();
        let mut got: Vec<String> = c.mounts.iter().map(|(h, ct)| format!("{h}:{ct}")).collect();
        got.push("$LOG_DIR:/logs".into());
        got.sort();
        let mut want: Vec<String> = capture["steps"][0]["container_mounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                m.as_str()
                    .unwrap()
                    .replace("/SRTCTL", &root.display().to_string())
                    .replace("/MODEL", &model.display().to_string())
                    .replace("/LOGS", "$LOG_DIR")
            })
            .collect();
        want.sort();
        // What the recipe's extra_mount adds, srtctl and mcsup alike (its host paths as given).
        assert_eq!(got, want, "{stem}");
        assert!(
            out.benchmark.contains("/srtctl-benchmarks/") || out.benchmark.starts_with("custom"),
            "{stem}: {}",
            out.benchmark
        );
        // mcsup's own, on top: the job's directory (and the binary, for mcsup in the container).
        let script_mounts = out
            .script
            .lines()
            .find(|l| l.contains("--container-mounts="))
            .unwrap_or_default()
            .to_string();
        assert!(
            script_mounts.contains("$LOG_DIR:/logs")
                && script_mounts.contains("/srtctl-benchmarks"),
            "{stem}: {script_mounts}"
        );
    }
}

/// A benchmark that runs srtctl's scripts needs the checkout they come from: without
/// `srtctl_root`, or with one that lacks them, `mcsup render` says so at `benchmark.type` rather
/// than letting the client fail once the models have loaded.
#[test]
fn a_benchmark_without_srtctls_scripts_is_refused_at_render() {
    let d = tempfile::tempdir().unwrap();
    let image = d.path().join("image.sqsh");
    std::fs::write(&image, "").unwrap();
    let stem = fixtures().join("srt-slurm-v1/benchmark/mocker-agg.yaml");
    let r = recipe::load_file(&stem).unwrap();
    let alias = r
        .raw_get(&["model", "container"])
        .and_then(|v| v.as_str())
        .unwrap()
        .to_string();
    for (extra, why) in [
        ("", "names no srtctl_root"),
        (
            "srtctl_root: /nonexistent/srt-slurm\n",
            "has no src/srtctl/benchmarks/scripts",
        ),
    ] {
        let config = d.path().join("srtslurm.yaml");
        std::fs::write(
            &config,
            format!("{extra}containers: {{{alias:?}: {}}}\n", image.display()),
        )
        .unwrap();
        let e = launch::render(&request(stem.clone(), Some(config), d.path(), true))
            .expect_err("refused")
            .to_string();
        assert!(e.contains("benchmark.type") && e.contains(why), "{e}");
        assert!(e.contains("set srtctl_root"), "{e}");
    }
    // manual needs no scripts.
    let manual = fixtures().join("srt-slurm-v1/benchmark/mocker-1p2d.yaml");
    let config = d.path().join("srtslurm.yaml");
    let r = recipe::load_file(&manual).unwrap();
    let alias = r
        .raw_get(&["model", "container"])
        .and_then(|v| v.as_str())
        .unwrap()
        .to_string();
    std::fs::write(
        &config,
        format!("containers: {{{alias:?}: {}}}\n", image.display()),
    )
    .unwrap();
    let out = launch::render(&request(manual, Some(config), d.path(), true)).unwrap();
    assert!(out.benchmark.starts_with("manual"), "{}", out.benchmark);
}

/// Issue 56, item 2: `mcsup render -o DIR` of a sweep (the upstream mocker recipe with its
/// `speedup_ratio` swept) writes each job's expanded recipe and batch script under DIR/<job
/// name>/, one line per job; each recipe is one `mcsup plan` takes, with its value in the
/// worker's argv; each script carries that recipe and passes `bash -n`. Without `-o` it refuses,
/// naming the job count. `FILE:SELECTOR` plans one variant of an override file; a selector that
/// selects nothing fails with srtctl's message.
#[test]
fn a_sweep_renders_each_job_into_its_directory_and_plan_takes_each() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(fixtures().join("srt-slurm-v1/mocker-agg.yaml")).unwrap();
    let text = text[..text.find("benchmark:").unwrap()]
        .replace("  speedup_ratio: 100\n", "  speedup_ratio: \"{speedup}\"\n")
        + "sweep:\n  speedup: [10, 100]\n";
    let sweep = dir.path().join("sweep.yaml");
    std::fs::write(&sweep, &text).unwrap();
    let mcsup = |args: &[&str]| {
        std::process::Command::new(common::MCSUP)
            .current_dir(dir.path())
            .env_remove("SRTSLURM_CONFIG")
            .args(args)
            .output()
            .unwrap()
    };
    let plan_of = |recipe: &str| {
        mcsup(&[
            "plan",
            "--recipe",
            recipe,
            "--nodelist",
            "n1",
            "--node",
            "n1",
        ])
    };
    let out = dir.path().join("jobs");
    let o = mcsup(&[
        "render",
        "-f",
        "sweep.yaml",
        "-o",
        "jobs",
        "--no-container",
        "--mcsup",
        "/shared/bin/mcsup",
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    for speed in ["10", "100"] {
        let name = format!("smoke-test-agg_speedup{speed}");
        assert!(
            stdout.contains(&format!("{name}\tspeedup={speed}\t1 node(s)")),
            "{stdout}"
        );
        let recipe = out.join(&name).join("recipe.yaml");
        let script = std::fs::read_to_string(out.join(&name).join("sbatch_script.sh")).unwrap();
        let written = std::fs::read_to_string(&recipe).unwrap();
        assert!(
            written.contains(&format!("speedup_ratio: '{speed}'")),
            "{written}"
        );
        assert!(
            script.contains(&written),
            "the script carries the job's recipe"
        );
        assert!(
            script.contains(&format!("#SBATCH --job-name={name}")),
            "{script}"
        );
        assert_clean_shell(&out.join(&name).join("sbatch_script.sh"), &script);
        let p = plan_of(recipe.to_str().unwrap());
        let plan = String::from_utf8_lossy(&p.stdout);
        assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
        assert!(
            plan.contains(&format!("--speedup-ratio {speed}.0 ")),
            "{plan}"
        );
    }
    let o = mcsup(&["render", "-f", "sweep.yaml", "--no-container"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("sweep.yaml holds 2 job(s)") && err.contains("-o DIR"),
        "{err}"
    );
    // An override file: one variant by its selector, none by a selector that matches nothing.
    let base = text[..text.find("sweep:").unwrap()].replace("\"{speedup}\"", "100");
    let indented: String = base.lines().map(|l| format!("  {l}\n")).collect();
    std::fs::write(
        dir.path().join("over.yaml"),
        format!("base:\n{indented}override_slow:\n  backend: {{speedup_ratio: 1}}\n"),
    )
    .unwrap();
    let p = plan_of("over.yaml:override_slow");
    let plan = String::from_utf8_lossy(&p.stdout);
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    assert!(plan.contains("--speedup-ratio 1.0 "), "{plan}");
    let p = plan_of("over.yaml:*nope*");
    let err = String::from_utf8_lossy(&p.stderr);
    assert_eq!(p.status.code(), Some(2), "{err}");
    assert!(
        err.contains("No variants match '*nope*'. Available: override_slow"),
        "{err}"
    );
}

/// Issue 56, item 5: without a container nothing mounts srtctl's `/configs`; when the cluster
/// config names the srt-slurm checkout (`srtctl_root`) and the recipe no `mcsup.configs_dir`,
/// the script gives every step the checkout's `configs/` (`MCSUP_CONFIGS_DIR`), where `mcsup
/// plan` then finds etcd and nats-server. A recipe's own `configs_dir` wins, and a job in a
/// container keeps srtctl's `/configs` mount.
#[test]
fn without_a_container_the_steps_take_configs_from_the_checkout() {
    let dir = tempfile::tempdir().unwrap();
    let root = srtctl_checkout(dir.path());
    let config = dir.path().join("srtslurm.yaml");
    std::fs::write(&config, format!("srtctl_root: {}\n", root.display())).unwrap();
    let text = std::fs::read_to_string(fixtures().join("srt-slurm-v1/mocker-agg.yaml")).unwrap();
    let text = text[..text.find("benchmark:").unwrap()].to_string();
    let recipe = dir.path().join("job.yaml");
    std::fs::write(&recipe, &text).unwrap();
    let r = launch::render(&request(
        recipe.clone(),
        Some(config.clone()),
        dir.path(),
        false,
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let configs = root.join("configs");
    assert_eq!(r.configs_dir.as_deref(), Some(configs.as_path()));
    let export = format!("export MCSUP_CONFIGS_DIR={}", configs.display());
    assert!(r.script.contains(&export), "{}", r.script);
    let script = dir.path().join("job.sh");
    std::fs::write(&script, &r.script).unwrap();
    assert_clean_shell(&script, &r.script);
    let plan = std::process::Command::new(common::MCSUP)
        .args(["plan", "--nodelist", "n1", "--node", "n1", "--recipe"])
        .arg(&recipe)
        .env("MCSUP_CONFIGS_DIR", &configs)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&plan.stdout);
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    assert!(
        shown.contains(&format!("argv: {}/etcd ", configs.display())),
        "{shown}"
    );
    // The recipe's own configs_dir wins; a container keeps srtctl's mount.
    std::fs::write(&recipe, format!("{text}mcsup: {{configs_dir: /opt/c}}\n")).unwrap();
    let r = launch::render(&request(
        recipe.clone(),
        Some(config.clone()),
        dir.path(),
        false,
    ))
    .unwrap();
    assert!(r.configs_dir.is_none() && !r.script.contains("MCSUP_CONFIGS_DIR"));
    std::fs::write(&recipe, &text).unwrap();
    let image = dir.path().join("dynamo-sglang.sqsh");
    std::fs::write(&image, "").unwrap();
    std::fs::write(
        &config,
        format!(
            "srtctl_root: {}\ncontainers: {{dynamo-sglang: {}}}\n",
            root.display(),
            image.display()
        ),
    )
    .unwrap();
    let r = launch::render(&request(recipe, Some(config), dir.path(), true))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(r.configs_dir.is_none() && !r.script.contains("MCSUP_CONFIGS_DIR"));
}

/// Round 4's H2: in a shared output directory another user guesses the next job id and prepares
/// `<id>/` with `sbatch_script.sh` linked to the victim's file. `submit` (here against stand-in
/// `sbatch`, `scancel` and `scontrol` on PATH: sbatch answers 777) refuses the directory, writes
/// nothing through the link, and cancels the held job. And a script run without sbatch (no
/// `SLURM_JOB_ID`, round 4's L4) says so before anything else.
#[test]
fn submit_writes_nothing_into_a_job_directory_someone_else_prepared() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let calls = dir.path().join("calls");
    for (name, body) in [("sbatch", "echo 777"), ("scancel", ""), ("scontrol", "")] {
        let p = bin.join(name);
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\necho \"{name} $*\" >> {}\n{body}\n",
                calls.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::copy(
        fixtures().join("srt-slurm-v1/mocker-agg.yaml"),
        dir.path().join("r.yaml"),
    )
    .unwrap();
    let out = dir.path().join("outputs");
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "the victim's data\n").unwrap();
    // The prepared job directory: open to all, the script's place a link to the victim's file.
    let job = out.join("777");
    std::fs::create_dir_all(&job).unwrap();
    std::fs::set_permissions(&job, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::os::unix::fs::symlink(&victim, job.join("sbatch_script.sh")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = std::process::Command::new(common::MCSUP)
        .current_dir(dir.path())
        .env_remove("SRTSLURM_CONFIG")
        .env("PATH", &path)
        .args([
            "submit",
            "-f",
            "r.yaml",
            "--no-container",
            "--no-cluster-check",
        ])
        .args(["--output-dir", out.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("can be written by others (mode 777)")
            && err.contains("writes nothing through it"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "the victim's data\n",
        "written through the link"
    );
    let calls = std::fs::read_to_string(&calls).unwrap();
    assert!(calls.contains("scancel 777"), "{calls}");
    assert!(!calls.contains("release"), "{calls}");

    // The same script run by hand, outside Slurm.
    let r = rendered(false, dir.path());
    let script = dir.path().join("job.sh");
    std::fs::write(&script, &r.script).unwrap();
    let o = std::process::Command::new("bash")
        .arg(&script)
        .env_remove("SLURM_JOB_ID")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "run me with sbatch (no SLURM_JOB_ID)\n"
    );
}
