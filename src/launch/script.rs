//! The batch script `mcsup render` writes: srtctl's `#SBATCH` set, mcsup's early warning, and
//! one mcsup per node (each its own srun step, pinned to its node, optionally inside the
//! recipe's container through pyxis). Pure: text from values.

use std::fmt::Write as _;
use std::path::Path;

use super::sbatch::Allocation;
use crate::render::shell_word;

/// Where mcsup's binary appears inside the container.
pub const MCSUP_IN_CONTAINER: &str = "/opt/mcsup/bin/mcsup";

/// The container every step runs in (pyxis `srun --container-*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    pub image: String,
    /// Host path → container path, in srtctl's order; the mcsup binary's own mount comes last.
    pub mounts: Vec<(String, String)>,
}

/// Everything the script says.
#[derive(Debug, Clone)]
pub struct Script<'a> {
    /// The recipe as given (for the header) and its text (carried in the script).
    pub recipe_path: &'a Path,
    pub recipe_text: &'a str,
    /// `MCSUP_CONFIGS_DIR` for every step (no container: the checkout's `configs/`).
    pub configs_dir: Option<&'a Path>,
    pub allocation: &'a Allocation,
    /// `--signal=B:USR1@N` and the drain's bound: the teardown's worst case plus margins.
    pub early_warning_s: u64,
    /// Jobs write under `<output_base>/<job id>/`.
    pub output_base: &'a Path,
    /// The mcsup binary, on the compute nodes' file system.
    pub mcsup: &'a Path,
    pub container: Option<&'a Container>,
    /// mcsup runs on the host and starts its steps in `container` (a TRT-LLM job: its images have
    /// no Slurm client for mcsup to start the endpoints' steps from inside, docs/trtllm.md).
    pub host_mcsup: bool,
    /// The recipe's `srun_options`, as `--key[=value]` words.
    pub srun_options: &'a [String],
    /// Roles of each node in node-list order (`--roles`); empty: every node derives its own.
    pub roles: &'a [String],
}

/// A heredoc delimiter that no line of `text` equals.
fn delimiter(text: &str) -> String {
    let mut d = "MCSUP_RECIPE_END".to_string();
    while text.lines().any(|l| l == d) {
        d.push('_');
    }
    d
}

/// The container's mounts, in srtctl's order, then the job's directory and its log directory at
/// `/logs` (and, for mcsup itself in the container, its binary), for a double-quoted word: the
/// job's own paths are expanded at run time; the rest is as rendered.
fn mounts(c: &Container, with_mcsup: bool) -> String {
    let mut m: Vec<String> = c.mounts.iter().map(|(h, ct)| format!("{h}:{ct}")).collect();
    m.push("$OUTPUT_DIR:$OUTPUT_DIR".into());
    m.push("$LOG_DIR:/logs".into());
    if with_mcsup {
        m.push(format!("$MCSUP:{MCSUP_IN_CONTAINER}:ro"));
    }
    m.join(",").replace('"', "")
}

fn array(words: &[String]) -> String {
    let quoted: Vec<String> = words.iter().map(|w| shell_word(w)).collect();
    format!("({})", quoted.join(" "))
}

impl Script<'_> {
    /// The script's text.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let w = &mut s;
        let _ = writeln!(w, "#!/bin/bash");
        let _ = writeln!(
            w,
            "# Written by `mcsup render` (mcsup {}) from {}.",
            env!("CARGO_PKG_VERSION"),
            // A line break in the file's name would end the comment and start a command.
            self.recipe_path
                .display()
                .to_string()
                .replace(char::is_control, "?")
        );
        let _ = writeln!(
            w,
            "# The #SBATCH set is srtctl's for this recipe (generate_minimal_sbatch_script), then mcsup's"
        );
        let _ = writeln!(
            w,
            "# early warning: USR1 {} s before the time limit, time for every node's drain and ordered teardown.",
            self.early_warning_s
        );
        for d in &self.allocation.directives {
            let _ = writeln!(w, "{}", d.line());
        }
        let _ = writeln!(w, "#SBATCH --signal=B:USR1@{}", self.early_warning_s);
        w.push_str(HOW);
        self.settings(w);
        w.push_str(CHECKS);
        let delim = delimiter(self.recipe_text);
        let _ = writeln!(w, "cat > \"$RECIPE\" <<'{delim}'");
        w.push_str(self.recipe_text);
        if !self.recipe_text.ends_with('\n') {
            w.push('\n');
        }
        let _ = writeln!(w, "{delim}");
        w.push_str(STEPS);
        s
    }

    fn settings(&self, w: &mut String) {
        let _ = writeln!(w, "MCSUP={}", shell_word(&self.mcsup.display().to_string()));
        let _ = writeln!(
            w,
            "OUTPUT_DIR={}/\"$SLURM_JOB_ID\"",
            shell_word(&self.output_base.display().to_string())
        );
        let _ = writeln!(w, "LOG_DIR=\"$OUTPUT_DIR/logs\"");
        let _ = writeln!(w, "RECIPE=\"$OUTPUT_DIR/recipe.yaml\"");
        let _ = writeln!(w, "NODES_ASKED={}", self.allocation.nodes);
        let _ = writeln!(w, "DRAIN_TIMEOUT={}", self.early_warning_s);
        let _ = writeln!(
            w,
            "ROLES=\"${{ROLES:-{}}}\"",
            self.roles.join(" ").replace(['"', '$', '`', '\\'], "")
        );
        let _ = writeln!(w, "SRUN_OPTIONS={}", array(self.srun_options));
        if let Some(dir) = self.configs_dir {
            let _ = writeln!(
                w,
                "# No container mounts srtctl's /configs: etcd and nats-server from the srt-slurm checkout."
            );
            let _ = writeln!(
                w,
                "export MCSUP_CONFIGS_DIR={}",
                shell_word(&dir.display().to_string())
            );
        }
        match self.container {
            None => {
                let _ = writeln!(w, "CONTAINER=()   # rendered with --no-container");
                let _ = writeln!(w, "STEP_MCSUP=\"$MCSUP\"");
                let _ = writeln!(w, "STEPS_IN=()");
            }
            Some(c) if self.host_mcsup => {
                let _ = writeln!(
                    w,
                    "# A TRT-LLM job: mcsup runs on the host (the image has no Slurm client) and starts each"
                );
                let _ = writeln!(w, "# endpoint as a step in the container (docs/trtllm.md).");
                let _ = writeln!(w, "CONTAINER=()");
                let _ = writeln!(w, "STEP_MCSUP=\"$MCSUP\"");
                let _ = writeln!(
                    w,
                    "STEPS_IN=(--step-container-image={}",
                    shell_word(&c.image)
                );
                let _ = writeln!(w, "  --step-container-mounts=\"{}\")", mounts(c, false));
            }
            Some(c) => {
                let _ = writeln!(
                    w,
                    "CONTAINER=(--container-image={} --no-container-entrypoint --no-container-mount-home",
                    shell_word(&c.image)
                );
                let _ = writeln!(w, "  --container-mounts=\"{}\"", mounts(c, true));
                let _ = writeln!(w, "  --container-workdir=\"$OUTPUT_DIR\")");
                let _ = writeln!(w, "STEP_MCSUP={MCSUP_IN_CONTAINER}");
                let _ = writeln!(w, "STEPS_IN=()");
            }
        }
    }
}

const HOW: &str = r#"#
# One mcsup per node, each its own srun step pinned to its node: every node finds its roles in
# srtctl's layout from its place in the node list (`mcsup run --role auto`), or takes them from
# ROLES. The first node is the infra node (etcd, NATS, the Mooncake master, the frontend).
# Signals (tests/slurm/FINDINGS.md): Slurm's early warning or `scancel --batch --signal=USR1 <job>`
# reaches this shell, which sends USR1 (mcsup's drain: the ordered teardown) to every step; a
# step that ends (a node failed, or finished) drains the others. A plain scancel sends SIGTERM to
# the steps themselves, which tear down as well.
#
# Knobs (environment at submission; sbatch passes it on):
#   ROLES        the roles of each node, space-separated, in node-list order     [derived: auto]
#   MCSUP_ARGS   extra `mcsup run` options for every node, e.g. "--log-format json"
#   STEP_CPUS    CPUs for each mcsup step                    [every CPU of the node we were given]
set -uo pipefail   # no -e: the statuses of wait and of the steps are handled below
[ -n "${SLURM_JOB_ID:-}" ] || { echo "run me with sbatch (no SLURM_JOB_ID)" >&2; exit 2; }

"#;

const CHECKS: &str = r#"MCSUP_ARGS="${MCSUP_ARGS:-}"
STEP_CPUS="${STEP_CPUS:-${SLURM_CPUS_ON_NODE:-1}}"

say() { printf '[%s job %s] %s\n' "$(date +%T)" "${SLURM_JOB_ID:-?}" "$*"; }

[ -x "$MCSUP" ] || { say "mcsup ($MCSUP) is not an executable file on $(hostname): put the binary on a path every node sees and render again with --mcsup PATH"; exit 2; }
mkdir -p "$LOG_DIR" || { say "cannot create $LOG_DIR"; exit 2; }
# The recipe as it was rendered: editing the file later does not change this job.
"#;

const STEPS: &str = r#"
mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
if [ "${#NODES[@]}" -ne "$NODES_ASKED" ]; then
  say "the recipe's layout needs $NODES_ASKED node(s), the job has ${#NODES[@]} ($SLURM_JOB_NODELIST): submit without -N/--nodes"; exit 2
fi
if [ -n "$ROLES" ]; then
  read -r -a ROLE_OF <<<"$ROLES"
else
  ROLE_OF=()
  for _ in "${NODES[@]}"; do ROLE_OF+=(auto); done
fi
if [ "${#NODES[@]}" -ne "${#ROLE_OF[@]}" ]; then
  say "ROLES names ${#ROLE_OF[@]} node(s), the job has ${#NODES[@]} ($SLURM_JOB_NODELIST)"; exit 2
fi
say "status: mcsup status --job $LOG_DIR; timeline: mcsup timeline $LOG_DIR"

DRAINED_AT=""
# USR1 goes to the mcsup steps only (named mcsup-<node>): a step an mcsup started itself (a TRT-LLM
# endpoint's ranks) would die of it; mcsup stops those in its ordered teardown.
mcsup_steps() { squeue -h -s -j "$SLURM_JOB_ID" -o '%i %j' 2>/dev/null | awk '$2 ~ /^mcsup-/ {print $1}'; }
drain() {
  say "$1: sending USR1 (drain) to the mcsup tasks"
  local steps
  steps="$(mcsup_steps)"
  if [ -n "$steps" ]; then
    # shellcheck disable=SC2086  # one step id per word
    scancel --signal=USR1 $steps || say "scancel --signal=USR1 $steps failed"
  else
    say "no mcsup step listed by squeue: USR1 to every step of the job"
    scancel --signal=USR1 "$SLURM_JOB_ID" || say "scancel --signal=USR1 failed"
  fi
  DRAINED_AT="${DRAINED_AT:-$SECONDS}"
}
trap 'drain "early warning (USR1)"' USR1
GOT_TERM=""
trap 'GOT_TERM=1; say "SIGTERM: the mcsup tasks got it too and are tearing down; waiting for them"' TERM

declare -A PID=() RC=()
FIRST_FAILURE=""
for i in "${!NODES[@]}"; do
  node="${NODES[$i]}" roles="${ROLE_OF[$i]}"
  # shellcheck disable=SC2086  # MCSUP_ARGS is an option list: word splitting intended
  srun --nodes=1 --ntasks=1 --cpus-per-task="$STEP_CPUS" -w "$node" \
       --job-name="mcsup-$node" --kill-on-bad-exit=0 "${SRUN_OPTIONS[@]}" "${CONTAINER[@]}" \
    "$STEP_MCSUP" run --role "$roles" --recipe "$RECIPE" --log-dir "$LOG_DIR" "${STEPS_IN[@]}" $MCSUP_ARGS &
  PID[$node]=$!
  say "started mcsup --role $roles on $node (srun pid $!)"
done

running() { local p; for p in "${PID[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }

reap() {  # record the status of every step that has ended; drain the rest after the first
  local node pid
  for node in "${!PID[@]}"; do
    pid="${PID[$node]}"
    [ -z "${RC[$node]:-}" ] || continue
    kill -0 "$pid" 2>/dev/null && continue
    wait "$pid"; RC[$node]=$?     # bash keeps the status of an already reaped child
    say "mcsup on $node exited with status ${RC[$node]}"
    if [ "${RC[$node]}" -ne 0 ] && [ -z "$FIRST_FAILURE" ]; then FIRST_FAILURE="${RC[$node]}"; fi
    if [ -z "$DRAINED_AT" ] && [ -z "$GOT_TERM" ] && running; then
      drain "mcsup on $node ended"
    fi
  done
}

while running; do
  if [ -z "$DRAINED_AT" ]; then
    wait -n 2>/dev/null
  else
    sleep 0.5      # draining: poll, so that the DRAIN_TIMEOUT below is enforced
  fi
  reap
  if [ -n "$DRAINED_AT" ] && running && [ $((SECONDS - DRAINED_AT)) -ge "$DRAIN_TIMEOUT" ]; then
    say "still running ${DRAIN_TIMEOUT}s after the drain: scancel (SIGTERM, SIGKILL after KillWait)"
    scancel "$SLURM_JOB_ID"
    DRAINED_AT=$((SECONDS + 1000000))   # only once
  fi
done
reap

status="${FIRST_FAILURE:-0}"
say "done: $(for n in "${NODES[@]}"; do printf '%s=%s ' "$n" "${RC[$n]:-?}"; done)exiting $status"
exit "$status"
"#;
