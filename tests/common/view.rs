//! The job view's readers, for tests: the timeline page in a real headless Chromium, and
//! `<node>.prom` through a real Prometheus text-format parser (the `prometheus-client` package's
//! `text_string_to_metric_families`, installed in the venv by scripts/setup.sh).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use super::MCSUP;

pub const CHROMIUM: &str = "/usr/bin/chromium";

pub fn chromium(args: &[&str], page: &Path) -> String {
    super::require(
        Path::new(CHROMIUM).exists(),
        "chromium (Debian package chromium)",
        "run scripts/setup.sh (scripts/test.sh does)",
    );
    // Headless Chromium now and then crashes on a loaded 2-core machine (crashpad's "no stack
    // mapping", seen once in CI while the Slurm tests ran beside it); it is the tests' reader, not
    // the product, so a crash is retried, twice at most, in a fresh profile, and every attempt's
    // status is kept for the message when all fail. What the page shows is still asserted by the
    // caller.
    let mut attempts = Vec::new();
    for _ in 0..3 {
        let home = tempfile::tempdir().unwrap();
        let out = Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--hide-scrollbars",
            ])
            .arg(format!("--user-data-dir={}", home.path().display()))
            .args(args)
            .arg(format!("file://{}", page.display()))
            .env("HOME", home.path())
            .stdin(Stdio::null())
            .output()
            .expect("run chromium");
        if out.status.success() {
            return String::from_utf8_lossy(&out.stdout).into_owned();
        }
        attempts.push(format!(
            "chromium {}:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    panic!("chromium failed 3 times:\n{}", attempts.join("\n"));
}

/// A screenshot of `page` in a `width` x `height` window, written to `shot`; copied to the path
/// in the environment variable `keep` names, when it is set (the docs' pictures come from there).
pub fn screenshot(page: &Path, shot: &Path, (width, height): (u32, u32), keep: Option<&str>) {
    chromium(
        &[
            &format!("--window-size={width},{height}"),
            &format!("--screenshot={}", shot.display()),
        ],
        page,
    );
    assert!(
        std::fs::metadata(shot).unwrap().len() > 1000,
        "an empty picture"
    );
    if let Some(to) = keep.and_then(|k| std::env::var(k).ok()) {
        std::fs::copy(shot, to).unwrap();
    }
}

/// `mcsup timeline DIR -o OUT`, which must succeed.
pub fn timeline(dir: &Path, out: &Path) {
    let o = Command::new(MCSUP)
        .arg("timeline")
        .arg(dir)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `data-from` of the first bar of `phase` for `node`/`process` in the DOM.
pub fn bar_from(dom: &str, node: &str, process: &str, phase: &str) -> Option<u64> {
    let g = format!(r#"data-node="{node}" data-process="{process}""#);
    let start = dom.find(&g)?;
    let group = &dom[start..start + dom[start..].find("</g>")?];
    let at = group.find(&format!(r#"data-phase="{phase}""#))?;
    let rest = &group[at..];
    let f = rest.find("data-from=\"")? + "data-from=\"".len();
    rest[f..].split('"').next()?.parse().ok()
}

/// (sample name, its labels "k=v,..." sorted) -> value, as the real parser reads the file.
/// Empty while mcsup has not written the file yet (callers wait for the samples they need).
pub fn parse_prom(path: &Path) -> BTreeMap<(String, String), f64> {
    if !path.exists() {
        return BTreeMap::new();
    }
    let py = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for fam in text_string_to_metric_families(open(sys.argv[1]).read()):
    for s in fam.samples:
        out.append([fam.type, s.name, ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())), s.value])
print(json.dumps(out))
"#;
    let venv = super::recipe::venv_bin();
    let out = Command::new(venv.join("python"))
        .args(["-c", py])
        .arg(path)
        .output()
        .expect("run the venv python");
    assert!(
        out.status.success(),
        "the parser refused {}:\n{}\n{}",
        path.display(),
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(path).unwrap_or_default()
    );
    let rows: Vec<(String, String, String, f64)> = serde_json::from_slice(&out.stdout).unwrap();
    rows.into_iter()
        .map(|(_, name, labels, v)| ((name, labels), v))
        .collect()
}
