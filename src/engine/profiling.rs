//! srtctl's `profiling:` on the worker side (v1 recipes; `core/schema.py: ProfilingConfig`,
//! `cli/mixins/worker_stage.py`): the `nsys profile …` prefix of each worker's command, the
//! `PROFILING_MODE`/`PROFILE_*` env, SGLang's torch profiler directory, and vLLM's
//! `--profiler-config`. srtctl's validation of the section comes with it. Output goes under the
//! job's log directory, `profiles/<mode>/` (srtctl's `/logs/profiles/<mode>/` in its container).
//! What triggers a capture (the benchmark client's `/start_profile`) is srtctl's benchmark
//! stage, not the worker's. Pure.

use super::flags::python_json_dumps;
use super::layout::TopoProcess;
use super::reader::Reader;
use crate::domain::{plan_err, PlanError, Role};
use crate::recipe::{FlagMap, Recipe};

/// What captures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileKind {
    /// Nsight Systems, started and stopped by the CUDA profiler API (the engine's steps).
    Nsys,
    /// Nsight Systems over a fixed window (`delay_secs`, `duration_secs`).
    NsysTime,
    /// PyTorch's profiler (SGLang, `SGLANG_TORCH_PROFILER_DIR`).
    Torch,
}

impl ProfileKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Nsys => "nsys",
            Self::NsysTime => "nsys-time",
            Self::Torch => "torch",
        }
    }
}

/// One mode's capture window in engine steps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Steps {
    pub start: Option<i64>,
    pub stop: Option<i64>,
}

/// `profiling:` when it is on (`type` other than `none`).
#[derive(Debug, Clone, PartialEq)]
pub struct Profiling {
    pub kind: ProfileKind,
    pub extra_nsys_args: Vec<String>,
    /// `prefill`, `decode`, `aggregated`, as given.
    pub phases: Vec<(Role, Steps)>,
    pub delay_secs: Option<i64>,
    pub duration_secs: Option<i64>,
    pub benchmark_duration_secs: i64,
    /// The frontend is Dynamo's: nsys also follows the worker's forks.
    pub dynamo_frontend: bool,
}

/// The keys of `profiling:` srtctl reads.
const KEYS: &[&str] = &[
    "type",
    "extra_nsys_args",
    "prefill",
    "decode",
    "aggregated",
    "delay_secs",
    "duration_secs",
    "benchmark_duration_secs",
];

impl Profiling {
    /// Read `profiling:`; `Ok(None)` when it is absent or `type: none`. `disaggregated`: the job
    /// has prefill/decode workers.
    pub fn from_recipe(
        recipe: &Recipe,
        disaggregated: bool,
        frontend: super::frontend::FrontendType,
    ) -> Result<Option<Self>, PlanError> {
        let r = Reader {
            recipe,
            section: "profiling",
        };
        if let Some(serde_yaml::Value::Mapping(m)) = recipe.raw_get(&["profiling"]) {
            if let Some(k) = m
                .keys()
                .filter_map(|k| k.as_str())
                .find(|k| !KEYS.contains(k))
            {
                return Err(plan_err(
                    format!("profiling.{k}"),
                    "is not a profiling setting srtctl knows",
                    format!("use one of: {}", KEYS.join(", ")),
                ));
            }
        }
        let kind = match r.string("type")?.as_deref().unwrap_or("none") {
            "none" => return Ok(None),
            "nsys" => ProfileKind::Nsys,
            "nsys-time" => ProfileKind::NsysTime,
            "torch" => ProfileKind::Torch,
            other => {
                return Err(plan_err(
                    "profiling.type",
                    format!("unknown profiling type `{other}`"),
                    "use none, nsys, nsys-time or torch",
                ))
            }
        };
        let extra_nsys_args = match r.raw("extra_nsys_args") {
            None => Vec::new(),
            Some(serde_yaml::Value::Sequence(s)) => s
                .iter()
                .map(|v| match v {
                    serde_yaml::Value::String(s) => Ok(s.clone()),
                    other => Err(r.bad("extra_nsys_args", other, "a string", "[\"--stats=true\"]")),
                })
                .collect::<Result<_, _>>()?,
            Some(v) => {
                return Err(r.bad(
                    "extra_nsys_args",
                    v,
                    "a list of strings",
                    "[\"--stats=true\"]",
                ))
            }
        };
        let mut phases = Vec::new();
        for role in Role::ALL {
            let key = role.as_str();
            let Some(v) = r.raw(key) else { continue };
            let serde_yaml::Value::Mapping(m) = v else {
                return Err(r.bad(key, v, "a mapping", "{start_step: 10, stop_step: 20}"));
            };
            let step = |name: &str| -> Result<Option<i64>, PlanError> {
                match m.get(name) {
                    None | Some(serde_yaml::Value::Null) => Ok(None),
                    Some(serde_yaml::Value::Number(n)) if n.as_i64().is_some() => Ok(n.as_i64()),
                    Some(other) => Err(plan_err(
                        format!("profiling.{key}.{name}"),
                        format!(
                            "`{}` is not a whole number",
                            serde_yaml::to_string(other).unwrap_or_default().trim()
                        ),
                        format!("write {name}: 10"),
                    )),
                }
            };
            phases.push((
                role,
                Steps {
                    start: step("start_step")?,
                    stop: step("stop_step")?,
                },
            ));
        }
        let p = Self {
            kind,
            extra_nsys_args,
            phases,
            delay_secs: r.int("delay_secs")?,
            duration_secs: r.int("duration_secs")?,
            benchmark_duration_secs: r.int("benchmark_duration_secs")?.unwrap_or(300),
            // Dynamo's frontend is the one that discovers its workers.
            dynamo_frontend: frontend.kind().discovers_workers(),
        };
        p.validate(disaggregated)?;
        Ok(Some(p))
    }

    /// srtctl's `_validate_profiling`: windows that match the serving mode.
    fn validate(&self, disaggregated: bool) -> Result<(), PlanError> {
        if self.kind == ProfileKind::NsysTime {
            if self.delay_secs.is_none() || self.duration_secs.is_none() {
                return Err(plan_err(
                    "profiling",
                    "nsys-time needs delay_secs and duration_secs",
                    "set profiling.delay_secs and profiling.duration_secs (seconds from the worker's start, and the window)",
                ));
            }
            return Ok(());
        }
        let has = |r: Role| self.phases.iter().any(|(x, _)| *x == r);
        let (fix, ok) = if disaggregated {
            (
                "a disaggregated job profiles with profiling.prefill and profiling.decode (both), not profiling.aggregated",
                has(Role::Prefill) && has(Role::Decode) && !has(Role::Aggregated),
            )
        } else {
            (
                "an aggregated job profiles with profiling.aggregated only",
                has(Role::Aggregated) && !has(Role::Prefill) && !has(Role::Decode),
            )
        };
        if ok {
            Ok(())
        } else {
            Err(plan_err(
                "profiling",
                "the capture windows do not match the job's serving mode",
                fix,
            ))
        }
    }

    /// srtctl's refusal, under iteration-based nsys, of a vLLM `profiler-config` flag: the window
    /// comes from `profiling:` alone. `flags` are each mode's flags with their key path.
    pub fn check_vllm_flags<'a>(
        &self,
        flags: impl Iterator<Item = (&'a str, &'a FlagMap)>,
    ) -> Result<(), PlanError> {
        if self.kind != ProfileKind::Nsys {
            return Ok(());
        }
        for (key, f) in flags {
            if let Some((k, _)) =
                f.0.iter()
                    .find(|(k, _)| k.replace('_', "-").starts_with("profiler-config"))
            {
                return Err(plan_err(
                    format!("{key}.{k}"),
                    format!("sets {k}, which srtctl derives from profiling: when profiling.type is nsys"),
                    "remove it, and set the window with profiling.<mode>.start_step / stop_step",
                ));
            }
        }
        Ok(())
    }

    fn steps(&self, mode: Role) -> Option<Steps> {
        self.phases
            .iter()
            .find(|(r, _)| *r == mode)
            .map(|(_, s)| *s)
    }

    /// Where a mode's captures go, below the log directory.
    pub fn dir(log_dir: &str, mode: Role) -> String {
        format!(
            "{}/profiles/{}",
            log_dir.trim_end_matches('/'),
            mode.short()
        )
    }

    /// srtctl's `get_nsys_prefix` for one SGLang/vLLM/mocker worker process (empty for torch).
    pub fn nsys_prefix(&self, log_dir: &str, node: &str, p: &TopoProcess) -> Vec<String> {
        let mut cmd: Vec<String> = match self.kind {
            ProfileKind::Torch => return Vec::new(),
            ProfileKind::NsysTime => {
                let mut c = [
                    "profile",
                    "-t",
                    "cuda,nvtx",
                    "--cuda-graph-trace=node",
                    "--force-overwrite",
                    "true",
                ]
                .map(String::from)
                .to_vec();
                if let Some(d) = self.delay_secs {
                    c.extend(["--delay".into(), d.to_string()]);
                }
                if let Some(d) = self.duration_secs {
                    c.extend(["--duration".into(), d.to_string()]);
                }
                c
            }
            ProfileKind::Nsys => [
                "profile",
                "-t",
                "cuda,nvtx",
                "--cuda-graph-trace=node",
                "-c",
                "cudaProfilerApi",
                "--capture-range-end",
                "stop",
                "--force-overwrite",
                "true",
            ]
            .map(String::from)
            .to_vec(),
        };
        // `nsys` from the worker's PATH (srtctl's SRTCTL_NSYS_BIN is a setting of its own process).
        cmd.insert(0, "nsys".into());
        cmd.extend(self.extra_nsys_args.iter().cloned());
        if self.dynamo_frontend {
            cmd.push("--trace-fork-before-exec=true".into());
        }
        let mode = p.mode.short();
        let gpus = p.cuda_visible_devices().replace(',', "-");
        cmd.extend([
            "-o".into(),
            format!(
                "{}/{node}_{mode}_w{}_profile_gpu{gpus}",
                Self::dir(log_dir, p.mode),
                p.index
            ),
        ]);
        cmd
    }

    /// srtctl's `_get_nsys_prefix_trtllm` for every rank of the TRT-LLM endpoint led by `leader`
    /// on `node` (empty for torch): UCX traces, `--kill none --wait all`, one report per rank
    /// (`%q{SLURM_PROCID}`, expanded by nsys).
    pub fn nsys_prefix_trtllm(
        &self,
        log_dir: &str,
        node: &str,
        leader: &TopoProcess,
    ) -> Vec<String> {
        let mut cmd: Vec<String> = [
            "nsys",
            "profile",
            "-t",
            "cuda,nvtx,ucx",
            "--sample=none",
            "--cuda-graph-trace=node",
        ]
        .map(String::from)
        .to_vec();
        match self.kind {
            ProfileKind::Torch => return Vec::new(),
            ProfileKind::NsysTime => {
                if let Some(d) = self.delay_secs {
                    cmd.extend(["--delay".into(), d.to_string()]);
                }
                if let Some(d) = self.duration_secs {
                    cmd.extend(["--duration".into(), d.to_string()]);
                }
            }
            ProfileKind::Nsys => cmd
                .extend(["-c", "cudaProfilerApi", "--capture-range-end", "stop"].map(String::from)),
        }
        cmd.extend(self.extra_nsys_args.iter().cloned());
        cmd.extend(
            [
                "--kill",
                "none",
                "--wait",
                "all",
                "--force-overwrite",
                "true",
                "-o",
            ]
            .map(String::from),
        );
        cmd.push(format!(
            "{}/{node}_{}_w{}_profile_rank%q{{SLURM_PROCID}}",
            Self::dir(log_dir, leader.mode),
            leader.mode.short(),
            leader.index
        ));
        cmd
    }

    /// srtctl's `get_env_vars(mode, profile_dir)`, set after `environment:`.
    pub fn env(&self, mode: Role, log_dir: &str) -> Vec<(String, String)> {
        let short = mode.short();
        let mut env = vec![
            ("PROFILING_MODE".to_string(), short.to_string()),
            ("PROFILE_TYPE".to_string(), self.kind.as_str().to_string()),
        ];
        let steps = self.steps(mode);
        if let Some(s) = steps {
            let key = short.to_ascii_uppercase();
            if let Some(v) = s.start {
                env.push((format!("PROFILE_{key}_START_STEP"), v.to_string()));
            }
            if let Some(v) = s.stop {
                env.push((format!("PROFILE_{key}_STOP_STEP"), v.to_string()));
            }
        }
        match self.kind {
            ProfileKind::Torch => {
                env.push(("SGLANG_TORCH_PROFILER_DIR".into(), Self::dir(log_dir, mode)));
            }
            ProfileKind::NsysTime => env.push((
                "PROFILE_BENCHMARK_DURATION_SECS".into(),
                self.benchmark_duration_secs.to_string(),
            )),
            ProfileKind::Nsys => {
                if let Some(Steps {
                    start: Some(a),
                    stop: Some(b),
                }) = steps
                {
                    env.push(("TLLM_PROFILE_START_STOP".into(), format!("{a}-{b}")));
                    env.push(("TLLM_LLMAPI_ENABLE_NVTX".into(), "1".into()));
                }
            }
        }
        env
    }

    /// vLLM's `--profiler-config` for iteration-based nsys: the engine's own CUDA profiler
    /// window, as srtctl derives it from the mode's steps.
    pub fn vllm_profiler_config(&self, mode: Role) -> Option<String> {
        if self.kind != ProfileKind::Nsys {
            return None;
        }
        let s = self.steps(mode)?;
        let (start, stop) = (s.start?, s.stop?);
        Some(python_json_dumps(&[
            ("profiler".into(), "cuda".into()),
            ("delay_iterations".into(), start.into()),
            ("max_iterations".into(), (stop - start).max(0).into()),
        ]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str, disagg: bool) -> Result<Option<Profiling>, PlanError> {
        let r = crate::recipe::parse_str(std::path::Path::new("r.yaml"), yaml).unwrap();
        Profiling::from_recipe(
            &r,
            disagg,
            crate::engine::frontend::FrontendType::default_kind(),
        )
    }

    #[test]
    fn windows_must_match_the_serving_mode() {
        let agg = "backend: {type: sglang}\nprofiling: {type: torch, aggregated: {start_step: 1, stop_step: 2}}";
        assert!(load(agg, false).unwrap().is_some());
        let e = load(agg, true).unwrap_err().to_string();
        assert!(e.contains("profiling.prefill and profiling.decode"), "{e}");
        let time = "backend: {type: sglang}\nprofiling: {type: nsys-time, delay_secs: 5}";
        assert!(load(time, true)
            .unwrap_err()
            .to_string()
            .contains("duration_secs"));
        let off = "backend: {type: sglang}\nprofiling: {type: none}";
        assert!(load(off, true).unwrap().is_none());
    }

    #[test]
    fn bad_values_name_their_key() {
        for (yaml, key) in [
            ("profiling: {type: perf}", "profiling.type"),
            (
                "profiling: {type: torch, aggregated: {start_step: x}}",
                "profiling.aggregated.start_step",
            ),
            (
                "profiling: {type: torch, aggregated: {}, stop: 1}",
                "profiling.stop",
            ),
            (
                "profiling: {type: nsys, extra_nsys_args: [1]}",
                "profiling.extra_nsys_args",
            ),
        ] {
            let e = load(&format!("backend: {{type: sglang}}\n{yaml}"), false)
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{yaml}: {e}");
        }
    }

    #[test]
    fn vllm_profiler_window_is_steps_after_the_start() {
        let p = load(
            "backend: {type: vllm}\nprofiling: {type: nsys, prefill: {start_step: 10, stop_step: 15}, decode: {start_step: 200}}",
            true,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            p.vllm_profiler_config(Role::Prefill).as_deref(),
            Some(r#"{"profiler": "cuda", "delay_iterations": 10, "max_iterations": 5}"#)
        );
        assert_eq!(p.vllm_profiler_config(Role::Decode), None);
        let env = p.env(Role::Prefill, "/l");
        assert!(env.contains(&("TLLM_PROFILE_START_STOP".into(), "10-15".into())));
        assert!(!p
            .env(Role::Decode, "/l")
            .iter()
            .any(|(k, _)| k == "TLLM_PROFILE_START_STOP"));
    }
}
