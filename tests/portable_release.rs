//! The portable release binaries (`scripts/release.sh`: glibc >= 2.28, x86_64 and aarch64) as
//! users get them from `dist/`: what their ELF asks of the dynamic loader, and a smoke run of
//! each on this machine, the x86_64 one natively and the aarch64 one under qemu-user.
//!
//! The binaries are found in `$MCSUP_DIST_DIR` (scripts/test.sh builds them and sets it), else
//! in `<repo>/dist`. A missing binary, qemu or arm64 runtime is a prerequisite (`require`):
//! skipped with the reason under a developer's nextest, a failure under scripts/test.sh and CI.
//!
//! The glibc check reads the ELF's version-needed section (`.gnu.version_r`), the list the
//! loader compares with the libc it finds ("version `GLIBC_2.34' not found"), with the `object`
//! crate, and checks its reading against `objdump -T` and against a host build that must fail it.
//!
//! Under qemu the aarch64 binary gets Debian's cross glibc (`-L /usr/aarch64-linux-gnu`, packages
//! libc6-arm64-cross, libgcc-s1-arm64-cross) and `LD_LIBRARY_PATH` pointing at it, because the
//! build machine also has the multiarch `libc6:arm64` (a dependency of `libibverbs-dev:arm64`,
//! which the aarch64 build needs): without it the cross loader finds that other libc through the
//! host's ld.so.cache, and a loader and libc of two builds (2.36-8cross1 and 2.36-9+deb12u14)
//! spin forever in the first `pthread_create` (seen: `mcsup run` hung at 100 % CPU).
use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{require, Mcsup, TestEnv};
use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
use object::Endianness;

/// The oldest glibc the release binaries must start on (RHEL/Rocky 8).
const GLIBC_FLOOR: [u32; 2] = [2, 28];

/// The libraries of glibc itself: present in every image that has a glibc at all.
const GLIBC_LIBS: [&str; 8] = [
    "libc.so.6",
    "libpthread.so.0",
    "libdl.so.2",
    "libm.so.6",
    "librt.so.1",
    "libutil.so.1",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
];

/// Where the aarch64 binary's loader and libc come from under qemu.
const ARM64_SYSROOT: &str = "/usr/aarch64-linux-gnu";

struct Arch {
    /// The name in the file name (`mcsup-<version>-<name>-linux-gnu`).
    name: &'static str,
    machine: object::elf::Machine,
    interpreter: &'static str,
    /// What runs the binary here, before its path (empty: natively).
    runner: &'static [&'static str],
    /// libibverbs of this architecture, which the ibverbs preflight loads.
    libibverbs: &'static str,
}

const X86_64: Arch = Arch {
    name: "x86_64",
    machine: object::elf::EM_X86_64,
    interpreter: "/lib64/ld-linux-x86-64.so.2",
    runner: &[],
    libibverbs: "/usr/lib/x86_64-linux-gnu/libibverbs.so.1",
};

const AARCH64: Arch = Arch {
    name: "aarch64",
    machine: object::elf::EM_AARCH64,
    interpreter: "/lib/ld-linux-aarch64.so.1",
    runner: &[
        "qemu-aarch64-static",
        "-L",
        ARM64_SYSROOT,
        "-E",
        "LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib",
    ],
    libibverbs: "/usr/lib/aarch64-linux-gnu/libibverbs.so.1",
};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn dist_dir() -> PathBuf {
    std::env::var_os("MCSUP_DIST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("dist"))
}

fn file_name(arch: &Arch) -> String {
    format!(
        "mcsup-{}-{}-linux-gnu",
        env!("CARGO_PKG_VERSION"),
        arch.name
    )
}

/// The release binary of `arch`, or the test is skipped (fails under CI) when it is not built.
fn binary(arch: &Arch) -> PathBuf {
    let path = dist_dir().join(file_name(arch));
    require(
        path.is_file(),
        &format!("the portable release binary {}", path.display()),
        "run scripts/release.sh (scripts/test.sh does, and sets MCSUP_DIST_DIR)",
    );
    path
}

/// What the ELF of a dynamically linked executable asks of the loader.
#[derive(Debug)]
struct ElfNeeds {
    machine: object::elf::Machine,
    interpreter: Option<String>,
    /// DT_NEEDED, in order.
    libraries: Vec<String>,
    /// (library, version) from the version-needed section.
    versions: Vec<(String, String)>,
}

fn read_elf(path: &Path) -> Result<ElfNeeds, object::Error> {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let data = &*data;
    let file = ElfFile64::<Endianness>::parse(data)?;
    let endian = file.endian();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let mut interpreter = None;
    for ph in file.elf_program_headers() {
        if let Some(i) = ph.interpreter(endian, data)? {
            interpreter = Some(text(i));
        }
    }
    let sections = file.elf_section_table();
    let dynamic = sections.dynamic_table(endian, data)?;
    let mut libraries = Vec::new();
    for d in dynamic.iter().filter(|d| d.tag == object::elf::DT_NEEDED) {
        libraries.push(text(dynamic.string(d)?));
    }
    let mut versions = Vec::new();
    if let Some((mut needs, link)) = sections.gnu_verneed(endian, data)? {
        let strings = sections.strings(endian, data, link)?;
        while let Some((need, mut aux)) = needs.next()? {
            let library = text(need.file(endian, strings)?);
            while let Some(a) = aux.next()? {
                versions.push((library.clone(), text(a.name(endian, strings)?)));
            }
        }
    }
    Ok(ElfNeeds {
        machine: file.elf_header().e_machine(endian),
        interpreter,
        libraries,
        versions,
    })
}

/// `GLIBC_2.2.5` -> [2, 2, 5]; None for anything else (`GLIBC_PRIVATE`, `GCC_3.0`).
fn glibc_version(name: &str) -> Option<Vec<u32>> {
    name.strip_prefix("GLIBC_")?
        .split('.')
        .map(|p| p.parse().ok())
        .collect()
}

fn highest_glibc<'a>(names: impl Iterator<Item = &'a str>) -> Option<Vec<u32>> {
    names.filter_map(glibc_version).max()
}

fn dotted(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(".")
}

/// The highest `GLIBC_` version among the dynamic symbols `objdump -T` lists.
fn objdump_highest_glibc(path: &Path) -> Option<Vec<u32>> {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(path)
        .output()
        .expect("run objdump");
    assert!(
        out.status.success(),
        "objdump -T {}: {out:?}",
        path.display()
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let tokens: Vec<String> = text
        .split_whitespace()
        .map(|t| t.trim_matches(|c| c == '(' || c == ')').to_string())
        .collect();
    highest_glibc(tokens.iter().map(String::as_str))
}

fn have_objdump() -> bool {
    Command::new("objdump")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The glibc check of one release binary: its architecture and loader, only glibc's own
/// libraries (libibverbs is loaded at run time, never linked), and no symbol version above the
/// floor, as objdump reads it too.
fn check_glibc_floor(arch: &Arch) {
    let path = binary(arch);
    require(
        have_objdump(),
        "objdump (binutils)",
        "apt-get install binutils",
    );
    let needs = read_elf(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        needs.machine,
        arch.machine,
        "{}: wrong architecture",
        path.display()
    );
    assert_eq!(
        needs.interpreter.as_deref(),
        Some(arch.interpreter),
        "{}",
        path.display()
    );
    assert!(
        needs.libraries.iter().any(|l| l == "libc.so.6"),
        "{needs:?}"
    );
    let foreign: Vec<&String> = needs
        .libraries
        .iter()
        .filter(|l| !GLIBC_LIBS.contains(&l.as_str()))
        .collect();
    assert!(
        foreign.is_empty(),
        "{} needs libraries that are not glibc's, which an engine image may lack: {foreign:?}",
        path.display()
    );
    let not_glibc: Vec<&(String, String)> = needs
        .versions
        .iter()
        .filter(|(_, v)| glibc_version(v).is_none())
        .collect();
    assert!(
        not_glibc.is_empty(),
        "{}: versions that are not a public glibc release: {not_glibc:?}",
        path.display()
    );
    let highest = highest_glibc(needs.versions.iter().map(|(_, v)| v.as_str()))
        .unwrap_or_else(|| panic!("{}: no GLIBC_ version needed: {needs:?}", path.display()));
    let too_new: Vec<&(String, String)> = needs
        .versions
        .iter()
        .filter(|(_, v)| glibc_version(v).is_some_and(|v| v > GLIBC_FLOOR.to_vec()))
        .collect();
    assert!(
        too_new.is_empty(),
        "{} needs glibc newer than {}: {too_new:?}",
        path.display(),
        dotted(&GLIBC_FLOOR)
    );
    assert_eq!(
        objdump_highest_glibc(&path).as_deref(),
        Some(&highest[..]),
        "objdump -T and the version-needed section disagree on {}",
        path.display()
    );
    eprintln!(
        "{}: {} for {}, needs {}, highest GLIBC_{} (floor {})",
        path.display(),
        arch.name,
        arch.interpreter,
        needs.libraries.join(" "),
        dotted(&highest),
        dotted(&GLIBC_FLOOR)
    );
}

#[test]
fn x86_64_release_needs_glibc_2_28_at_most() {
    check_glibc_floor(&X86_64);
}

#[test]
fn aarch64_release_needs_glibc_2_28_at_most() {
    check_glibc_floor(&AARCH64);
}

/// The check can fail: mcsup as cargo builds it for the tests, linked on this machine's glibc,
/// needs `__libc_start_main@GLIBC_2.34` wherever that glibc is 2.34 or newer (Debian 12: 2.36).
#[test]
fn the_glibc_check_fails_a_binary_linked_on_this_glibc() {
    require(
        have_objdump(),
        "objdump (binutils)",
        "apt-get install binutils",
    );
    // SAFETY: gnu_get_libc_version returns a static NUL-terminated string.
    let host = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
    let host: Vec<u32> = host
        .to_str()
        .unwrap()
        .split('.')
        .map(|p| p.parse().unwrap())
        .collect();
    let path = Path::new(common::MCSUP);
    let needs = read_elf(path).unwrap();
    let highest = highest_glibc(needs.versions.iter().map(|(_, v)| v.as_str())).unwrap();
    assert_eq!(objdump_highest_glibc(path), Some(highest.clone()));
    if host >= vec![2, 34] {
        assert!(
            highest > GLIBC_FLOOR.to_vec(),
            "a build on glibc {} should need more than {}: {needs:?}",
            dotted(&host),
            dotted(&GLIBC_FLOOR)
        );
    }
    eprintln!(
        "host glibc {}: cargo's own build needs GLIBC_{}",
        dotted(&host),
        dotted(&highest)
    );
}

#[test]
fn dist_checksums_cover_both_binaries() {
    let mut names = [file_name(&X86_64), file_name(&AARCH64)];
    names.sort();
    for arch in [&X86_64, &AARCH64] {
        binary(arch);
    }
    let sums = std::fs::read_to_string(dist_dir().join("SHA256SUMS")).expect("dist/SHA256SUMS");
    let mut listed: Vec<&str> = sums
        .lines()
        .map(|l| {
            l.split_once("  ")
                .expect("sha256sum's `<hash>  <name>` line")
                .1
        })
        .collect();
    listed.sort();
    assert_eq!(listed, names.iter().map(String::as_str).collect::<Vec<_>>());
    let check = Command::new("sha256sum")
        .args(["-c", "--strict", "SHA256SUMS"])
        .current_dir(dist_dir())
        .output()
        .unwrap();
    assert!(check.status.success(), "sha256sum -c: {check:?}");
}

/// A command that runs the release binary of `arch` here.
fn command(arch: &Arch, bin: &Path) -> Command {
    match arch.runner.split_first() {
        None => Command::new(bin),
        Some((runner, args)) => {
            let mut c = Command::new(runner);
            c.args(args).arg(bin);
            c
        }
    }
}

fn output(arch: &Arch, bin: &Path, args: &[&str]) -> Output {
    let out = command(arch, bin)
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {} {args:?}: {e}", bin.display()));
    eprintln!(
        "{} {args:?}: {} ({} bytes of stdout)",
        arch.name,
        out.status,
        out.stdout.len()
    );
    out
}

/// A plan of a job from recipes/ on a decode node with RDMA: the same JSON as the tests' own
/// build of this checkout prints (the same source; a stale dist/ differs).
const PLAN_ARGS: [&str; 9] = [
    "--role",
    "decode",
    "--recipe",
    "recipes/sglang-disagg-mooncake.yaml",
    "--node",
    "gpu-02",
    "--nodelist",
    "gpu-[01-02]",
    "--json",
];

fn smoke_version_plan_preflight(arch: &Arch, bin: &Path) {
    let out = output(arch, bin, &["--version"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("mcsup {}\n", env!("CARGO_PKG_VERSION"))
    );

    let plan = output(arch, bin, &[&["plan"][..], &PLAN_ARGS].concat());
    assert!(plan.status.success(), "{plan:?}");
    let reference = Command::new(common::MCSUP)
        .arg("plan")
        .args(PLAN_ARGS)
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(reference.status.success(), "{reference:?}");
    let doc: serde_json::Value = serde_json::from_slice(&plan.stdout).expect("plan JSON");
    assert!(
        doc["processes"].as_array().is_some_and(|p| !p.is_empty()),
        "{doc}"
    );
    assert!(
        plan.stdout == reference.stdout,
        "{}'s plan differs from this checkout's build (is dist/ stale? run scripts/release.sh)",
        bin.display()
    );

    // The ibverbs feature is in, and libibverbs of this architecture loads: the scan answers
    // (no RDMA here: "no RDMA subsystem"; on an RDMA node the devices).
    require(
        Path::new(arch.libibverbs).exists(),
        &format!("{} (libibverbs1 for {})", arch.libibverbs, arch.name),
        "run scripts/setup.sh (it installs libibverbs1 and, through scripts/release.sh, libibverbs-dev:arm64)",
    );
    let pre = output(arch, bin, &[&["preflight"][..], &PLAN_ARGS].concat());
    let report: serde_json::Value = serde_json::from_slice(&pre.stdout)
        .unwrap_or_else(|e| panic!("preflight JSON: {e}: {pre:?}"));
    let verbs = report["checks"]
        .as_array()
        .and_then(|c| {
            c.iter()
                .find(|c| c["group"] == "rdma" && c["name"] == "ibverbs")
        })
        .unwrap_or_else(|| panic!("no rdma/ibverbs check: {report}"));
    assert_eq!(verbs["status"], "ok", "{verbs}");
    assert!(
        verbs["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("libibverbs")),
        "{verbs}"
    );
}

/// Two `sleep` workers gated on a `sleep` service; SIGTERM stops the workers, then the service,
/// and mcsup exits 0 with nothing left.
fn smoke_run(arch: &Arch, bin: &Path) {
    let env = TestEnv::new();
    let recipe = env.path("smoke.yaml");
    std::fs::write(
        &recipe,
        format!(
            r#"schema: 2
name: portable-smoke
engine: sglang
frontend: {{type: none}}
services:
  - name: cache
    type: generic
    command: [sleep, "600"]
    start: before_workers
    critical: true
mcsup:
  workers:
    aggregated:
      - name: worker
        count: 2
        command: [sleep, "600"]
  shutdown: {{deadline_seconds: 10}}
  log_dir: {}
"#,
            env.log_dir().display()
        ),
    )
    .unwrap();
    let dir = env.dir.path();
    let child = command(arch, bin)
        .args(["run", "--role", "agg", "--node", "n1", "--recipe"])
        .arg(&recipe)
        .env("MCSUP_TEST_TAG", &env.tag)
        .env_remove("SLURM_JOB_ID")
        .env_remove("SLURM_JOB_NODELIST")
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("mcsup.stdout")).unwrap())
        .stderr(std::fs::File::create(dir.join("mcsup.stderr")).unwrap())
        .spawn()
        .expect("spawn the release binary");
    let mut m = Mcsup::new(&env, "n1", child, dir.to_path_buf());
    let t = Duration::from_secs(30);
    m.wait_event("worker-0", "ready", t);
    m.wait_event("worker-1", "ready", t);
    if !arch.runner.is_empty() {
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", m.pid())).unwrap();
        assert!(
            maps.contains(&format!("{ARM64_SYSROOT}/lib/libc.so.6")),
            "the emulated mcsup must run on the cross glibc of its loader (see the module doc)"
        );
    }
    // Waited for, not read once: qemu-user runs mcsup's clone(CLONE_VM | CLONE_VFORK) as a
    // fork, so the emulated mcsup goes on (and calls a started process ready) before the
    // child's exec, which a real vfork waits for.
    for p in ["cache", "worker-0", "worker-1"] {
        let pid = m.pid_of(p).unwrap_or_else(|| panic!("{p} not running"));
        common::wait_for(&format!("{p} ({pid}) to run sleep 600"), t, || {
            (common::cmdline(pid) == ["sleep", "600"]).then_some(())
        });
    }

    m.signal(nix::sys::signal::Signal::SIGTERM);
    let code = m.wait_exit(t);
    let evs = m.events();
    assert_eq!(
        code,
        0,
        "events: {:#?}\nstderr: {}",
        common::names(&evs),
        m.stderr()
    );
    let requested = Mcsup::index_of(&evs, "mcsup", "shutdown-requested");
    let service = Mcsup::index_of(&evs, "cache", "stopping");
    for w in ["worker-0", "worker-1"] {
        assert!(requested < Mcsup::index_of(&evs, w, "stopping"));
        assert!(
            Mcsup::index_of(&evs, w, "stopped") < service,
            "the workers stop before the service they depend on: {:#?}",
            common::names(&evs)
        );
    }
    Mcsup::index_of(&evs, "cache", "stopped");
    let finished = Mcsup::find(&evs, "mcsup", "finished");
    assert_eq!(finished.raw["detail"], "exit code 0", "{:?}", finished.raw);
    env.assert_no_leftovers();
}

#[test]
fn x86_64_release_runs_natively() {
    let bin = binary(&X86_64);
    smoke_version_plan_preflight(&X86_64, &bin);
    smoke_run(&X86_64, &bin);
}

#[test]
fn aarch64_release_runs_under_qemu() {
    let bin = binary(&AARCH64);
    let qemu_ok = Command::new(AARCH64.runner[0])
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    require(
        qemu_ok
            && Path::new(ARM64_SYSROOT)
                .join("lib/ld-linux-aarch64.so.1")
                .exists()
            && Path::new(ARM64_SYSROOT).join("lib/libc.so.6").exists(),
        "qemu-aarch64-static and Debian's arm64 cross glibc (/usr/aarch64-linux-gnu)",
        "apt-get install qemu-user-static libc6-arm64-cross libgcc-s1-arm64-cross (scripts/setup.sh does)",
    );
    smoke_version_plan_preflight(&AARCH64, &bin);
    smoke_run(&AARCH64, &bin);
}
