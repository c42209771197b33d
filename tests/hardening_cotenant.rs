//! Another user on the same node (issue 29, class 1): the files mcsup makes in places others can
//! reach. Two unprivileged users made with `setpriv` (uid 60001 is the neighbour, 60002 runs
//! mcsup; no account is needed) share a sticky, world-writable directory as `/tmp` and as a
//! shared log directory. The neighbour plants what the reproductions planted; the real
//! `mcsup run` as the other user must refuse, say which file and why, start nothing, and leave
//! the neighbour's files as they were. Needs root (to switch users) and `setpriv`.

use crate::common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{TestEnv, MCSUP};

const NEIGHBOUR: u32 = 60001;
const USER: u32 = 60002;

/// `argv` as `uid` (its own group, no supplementary groups).
fn as_user(uid: u32, argv: &[&str]) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        format!("--reuid={uid}"),
        format!("--regid={uid}"),
        "--clear-groups".into(),
        "--".into(),
    ])
    .args(argv);
    c
}

/// A shell command as the neighbour.
fn neighbour(script: &str) {
    let out = as_user(NEIGHBOUR, &["sh", "-c", script]).output().unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

struct Node {
    env: TestEnv,
    /// Sticky and world-writable, like `/tmp` (the user's TMPDIR).
    shared: PathBuf,
}

impl Node {
    fn new() -> Node {
        common::require(
            nix::unistd::geteuid().is_root() && Path::new("/usr/bin/setpriv").exists(),
            "root and setpriv (util-linux)",
            "run the tests as root (the CI does)",
        );
        let env = TestEnv::new();
        // The users must reach the test's directory (tempfile makes it 0700).
        std::fs::set_permissions(env.path(""), std::fs::Permissions::from_mode(0o755)).unwrap();
        let shared = env.path("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        Node { env, shared }
    }

    /// An srt-slurm 2.0 recipe whose node runs etcd and NATS (the dynamo frontend's discovery
    /// over a NATS request plane), with its logs in `log_dir`.
    fn recipe(&self, log_dir: &Path) -> PathBuf {
        let configs = self.env.path("configs");
        std::fs::create_dir_all(&configs).unwrap();
        std::os::unix::fs::symlink("/usr/bin/etcd", configs.join("etcd")).ok();
        std::os::unix::fs::symlink("/usr/sbin/nats-server", configs.join("nats-server")).ok();
        let path = self.env.path("recipe.yaml");
        std::fs::write(
            &path,
            format!(
                "schema: 2\nname: cotenant\ndynamo: {{request_plane: nats}}\nengine: sglang\nroles: {{aggregated: {{}}}}\nmcsup:\n  configs_dir: {}\n  log_dir: {}\n  workers:\n    aggregated:\n      - {{name: worker, command: [sleep, \"600\"]}}\n",
                configs.display(),
                log_dir.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        path
    }

    /// `mcsup run` as the user, on `recipe`, with the shared directory as its TMPDIR.
    fn run(&self, recipe: &Path) -> Output {
        let r = recipe.to_str().unwrap();
        as_user(
            USER,
            &[
                MCSUP,
                "run",
                "--recipe",
                r,
                "--role",
                "agg",
                "--node",
                "n1",
                "--skip-preflight",
            ],
        )
        .env("TMPDIR", &self.shared)
        .env("MCSUP_TEST_TAG", &self.env.tag)
        .output()
        .unwrap()
    }

    /// The user's own log directory.
    fn own_logs(&self) -> PathBuf {
        let d = self.env.path("logs");
        std::fs::create_dir_all(&d).unwrap();
        std::os::unix::fs::chown(&d, Some(USER), Some(USER)).unwrap();
        d
    }
}

/// The run was refused at set-up (exit 3) with every word of `says`, and started nothing.
fn refused(node: &Node, out: &Output, says: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    for s in says {
        assert!(err.contains(s), "missing {s:?} in:\n{err}");
    }
    node.env.assert_no_leftovers();
}

/// The scratch directory's name is predictable (`$TMPDIR/mcsup-<job>-<node>`): a neighbour who
/// makes it first, open to all with a link at `nats.conf` to the user's `~/.bashrc`, would have
/// had NATS's config written through it (this machine has `protected_symlinks=0`); made as a
/// link to one of the user's directories, the `rm -rf` of etcd's data would have run there.
#[test]
fn a_scratch_directory_made_by_a_neighbour_is_refused() {
    let node = Node::new();
    let logs = node.own_logs();
    let recipe = node.recipe(&logs);
    let home = node.env.path("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join(".bashrc"), "# mine\n").unwrap();
    std::fs::create_dir(home.join("etcd")).unwrap();
    std::fs::write(home.join("etcd/keep"), "mine").unwrap();
    for p in [
        &home,
        &home.join(".bashrc"),
        &home.join("etcd"),
        &home.join("etcd/keep"),
    ] {
        std::os::unix::fs::chown(p, Some(USER), Some(USER)).unwrap();
    }
    let scratch = node.shared.join("mcsup-local-n1");
    let s = scratch.display();
    neighbour(&format!(
        "mkdir {s} && chmod 777 {s} && ln -s {} {s}/nats.conf",
        home.join(".bashrc").display()
    ));
    let out = node.run(&recipe);
    refused(
        &node,
        &out,
        &[
            &format!("scratch directory {s} already exists and belongs to uid {NEIGHBOUR}"),
            "set TMPDIR",
        ],
    );
    assert_eq!(
        std::fs::read_to_string(home.join(".bashrc")).unwrap(),
        "# mine\n"
    );
    assert!(
        scratch.join("nats.conf").is_symlink(),
        "the neighbour's files are left alone"
    );

    std::fs::remove_dir_all(&scratch).unwrap();
    neighbour(&format!("ln -s {} {s}", home.display()));
    let out = node.run(&recipe);
    refused(
        &node,
        &out,
        &[&format!(
            "scratch directory {s} already exists and is a symbolic link"
        )],
    );
    assert_eq!(
        std::fs::read_to_string(home.join("etcd/keep")).unwrap(),
        "mine"
    );
}

/// A shared log directory (sticky, world-writable: what mcsup's own advice allows): a neighbour
/// who makes mcsup's files first (open to all) would read the children's output, secrets
/// included; a lock file made first would block the start with a misleading "another mcsup".
/// A job directory made by a neighbour, open to all, is refused: its owner can replace any file
/// in it, sticky bit or not.
#[test]
fn files_and_directories_a_neighbour_made_first_in_a_shared_log_directory_are_refused() {
    let node = Node::new();
    let shared_logs = node.shared.join("logs");
    std::fs::create_dir(&shared_logs).unwrap();
    std::fs::set_permissions(&shared_logs, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let recipe = node.recipe(&shared_logs);
    // The earlier runs' logs too (round 4's L3: a neighbour's `.log.1` failed every rotation).
    for file in [
        "n1.lock",
        "n1.events.jsonl",
        "n1.worker.log",
        "n1.worker.log.1",
        "n1.worker.log.5",
    ] {
        let f = shared_logs.join(file);
        neighbour(&format!("touch {0} && chmod 666 {0}", f.display()));
        let out = node.run(&recipe);
        refused(
            &node,
            &out,
            &[
                &f.display().to_string(),
                &format!("is owned by uid {NEIGHBOUR}, not by this user (uid {USER})"),
            ],
        );
        let m = std::fs::metadata(&f).unwrap();
        assert_eq!(
            (m.len(), m.uid()),
            (0, NEIGHBOUR),
            "{file}: nothing written into it"
        );
        std::fs::remove_file(&f).unwrap();
        // The refused run's own lock file stays (by design); the next case starts clean.
        let _ = std::fs::remove_file(shared_logs.join("n1.lock"));
    }
    let theirs = node.shared.join("job");
    neighbour(&format!("mkdir {0} && chmod 1777 {0}", theirs.display()));
    let recipe = node.recipe(&theirs);
    let out = node.run(&recipe);
    refused(
        &node,
        &out,
        &[&format!(
            "log directory {} belongs to another user (uid {NEIGHBOUR})",
            theirs.display()
        )],
    );
    assert_eq!(std::fs::read_dir(&theirs).unwrap().count(), 0);
}

/// `timeline -o` writes a file private to the user (it names every process of the job), and a
/// link planted at its name is replaced, not written through (class 1c).
#[test]
fn the_timeline_replaces_a_link_at_its_output_and_is_private() {
    let env = TestEnv::new();
    let logs = env.path("logs");
    std::fs::create_dir(&logs).unwrap();
    std::fs::write(
        logs.join("n1.events.jsonl"),
        "{\"ts_ms\":1000,\"t_ms\":0,\"node\":\"n1\",\"process\":\"w\",\"event\":\"spawned\",\"pid\":7}\n",
    )
    .unwrap();
    let target = env.path("bashrc");
    std::fs::write(&target, "# mine\n").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = env.path("timeline.html");
    std::os::unix::fs::symlink(&target, &out).unwrap();
    common::view::timeline(&logs, &out);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "# mine\n");
    let m = std::fs::symlink_metadata(&out).unwrap();
    assert!(m.file_type().is_file(), "{m:?}");
    assert_eq!(m.mode() & 0o777, 0o600);
    assert!(std::fs::read_to_string(&out).unwrap().contains("<html"));
}
