//! A process's log file: writes what it can, counts and reports what it cannot, and marks the
//! gap in the file once writes work again.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::dir::{ensure_dir, open_private, rotate, OpenMode, KEEP_ROTATED};

/// Output not written to the log file (a write error: disk full, file too large).
#[derive(Debug, Clone, Copy, Default)]
struct Lost {
    bytes: u64,
    lines: u64,
}

/// Output a log file could not take, as it reports it to the runtime (which alone writes the
/// events and status files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLoss {
    pub process: String,
    pub path: PathBuf,
    /// Bytes and lines lost by this write; at the end of the output, by the whole run of the
    /// process.
    pub bytes: u64,
    pub lines: u64,
    pub error: String,
    pub when: LossWhen,
}

/// Which report a [`LogLoss`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossWhen {
    /// The first write this run of the process lost.
    First,
    /// A later one.
    Again,
    /// The end of the output: `bytes` and `lines` are the totals (already reported one by one).
    End,
}

/// Where a log file (and its queue, see `writer`) sends its [`LogLoss`] reports.
pub type LossReport = std::sync::Arc<dyn Fn(LogLoss) + Send + Sync>;

/// A process's open log file: writes what it can and counts (and reports) what it cannot.
pub struct LogFile {
    file: File,
    path: PathBuf,
    process: String,
    report: Option<LossReport>,
    /// Lost since the last successful write: marked in the file once writes work again.
    gap: Lost,
    /// Lost by this run of the process in total.
    lost: Lost,
    error: Option<String>,
    /// Whether the last byte written ended a line (a gap marker then starts on a line of its own).
    at_line_start: bool,
}

/// Open (after rotating) `process`'s log file, recreating the log directory if it is gone; what
/// cannot be written is reported to `report`.
pub fn open_log(path: &Path, process: &str, report: Option<LossReport>) -> io::Result<LogFile> {
    // Most spawns find no log of an earlier run: the file is created at once, one system call.
    // Only when something is there is it rotated first (and refused if it is not a regular
    // file), and only when the directory is gone is that recreated.
    let file = match open_private(path, OpenMode::AppendNew) {
        Ok(file) => file,
        Err(e) if matches!(e.raw_os_error(), Some(libc::EEXIST | libc::ENOENT)) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                ensure_dir(dir)?;
            }
            rotate(path, KEEP_ROTATED)?;
            open_private(path, OpenMode::Append)?
        }
        Err(e) => return Err(e),
    };
    Ok(LogFile {
        file,
        path: path.to_path_buf(),
        process: process.to_string(),
        report,
        gap: Lost::default(),
        lost: Lost::default(),
        error: None,
        at_line_start: true,
    })
}

impl LogFile {
    /// Write `data` (whole lines); what cannot be written is counted, never retried.
    pub(super) fn write_lines(&mut self, data: &[u8]) {
        let marker = if self.gap.bytes > 0 {
            let mut m = if self.at_line_start {
                String::new()
            } else {
                "\n".to_string()
            };
            m.push_str(&format!(
                "[mcsup: {} bytes ({} lines) of output lost here: {}]\n",
                self.gap.bytes,
                self.gap.lines,
                self.error.as_deref().unwrap_or("write error")
            ));
            m.into_bytes()
        } else {
            Vec::new()
        };
        let joined;
        let buf: &[u8] = if marker.is_empty() {
            data
        } else {
            joined = [marker.as_slice(), data].concat();
            &joined
        };
        let mut done = 0;
        while done < buf.len() {
            match self.file.write(&buf[done..]) {
                Ok(0) => {
                    self.lose(buf, marker.len(), done, io::ErrorKind::WriteZero.into());
                    return;
                }
                Ok(n) => {
                    done += n;
                    self.at_line_start = buf[done - 1] == b'\n';
                    if done >= marker.len() {
                        self.gap = Lost::default();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.lose(buf, marker.len(), done, e);
                    return;
                }
            }
        }
    }

    /// `buf[done..]` was not written (`buf` starts with a `marker_len`-byte gap marker).
    fn lose(&mut self, buf: &[u8], marker_len: usize, done: usize, e: io::Error) {
        let rest = &buf[done.max(marker_len)..];
        let bytes = rest.len() as u64;
        let lines = rest.iter().filter(|&&b| b == b'\n').count() as u64;
        self.gap.bytes += bytes;
        self.gap.lines += lines;
        self.lost.bytes += bytes;
        self.lost.lines += lines;
        let error = e.to_string();
        let first = self.error.is_none();
        self.error = Some(error.clone());
        if first {
            tracing::warn!(
                process = %self.process,
                path = %self.path.display(),
                error = %error,
                "output lost: cannot write the log file; what is lost is counted (status file, events)"
            );
        }
        let when = if first {
            LossWhen::First
        } else {
            LossWhen::Again
        };
        self.send(bytes, lines, error, when);
    }

    fn send(&self, bytes: u64, lines: u64, error: String, when: LossWhen) {
        if let Some(report) = &self.report {
            report(LogLoss {
                process: self.process.clone(),
                path: self.path.clone(),
                bytes,
                lines,
                error,
                when,
            });
        }
    }
}

impl Drop for LogFile {
    /// The end of this run's output: report the total lost, if any.
    fn drop(&mut self) {
        if self.lost.bytes == 0 {
            return;
        }
        let error = self.error.clone().unwrap_or_default();
        tracing::warn!(
            process = %self.process,
            bytes = self.lost.bytes,
            lines = self.lost.lines,
            error = %error,
            "output lost: not written to the log file"
        );
        self.send(self.lost.bytes, self.lost.lines, error, LossWhen::End);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    /// `open_log` creates a new file in one step; whatever is already there goes through the
    /// rotation (and its refusals), and a removed directory is recreated.
    #[test]
    fn open_log_creates_rotates_refuses_and_recreates() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        let path = logs.join("n1.w.log");
        // New: created 0600, empty.
        let mut lf = open_log(&path, "p", None).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        lf.write_lines(b"first run\n");
        // There: the previous log becomes .1.
        let mut lf = open_log(&path, "p", None).unwrap();
        lf.write_lines(b"second run\n");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "second run\n");
        let rotated = logs.join("n1.w.log.1");
        assert_eq!(std::fs::read_to_string(&rotated).unwrap(), "first run\n");
        // A symlink or a FIFO put there: refused, never written through, never waited on.
        let victim = dir.path().join("victim");
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let e = open_log(&path, "p", None)
            .err()
            .expect("a symlink is refused");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(!victim.exists());
        std::fs::remove_file(&path).unwrap();
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = open_log(&path, "p", None).err().expect("a FIFO is refused");
        assert!(e.to_string().contains("FIFO"), "{e}");
        // The directory removed: recreated (0700) and the file created in it.
        std::fs::remove_dir_all(&logs).unwrap();
        open_log(&path, "p", None).unwrap();
        assert_eq!(
            std::fs::metadata(&logs).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert!(std::fs::metadata(&path).unwrap().is_file());
    }

    #[test]
    fn lost_output_is_counted_and_marked_once_writes_work_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n1.p.log");
        // /dev/full fails every write with ENOSPC.
        let full = OpenOptions::new().write(true).open("/dev/full").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let mut lf = LogFile {
            file: full,
            path: path.clone(),
            process: "p".into(),
            report: Some(std::sync::Arc::new(move |l| tx.send(l).unwrap())),
            gap: Lost::default(),
            lost: Lost::default(),
            error: None,
            at_line_start: true,
        };
        lf.write_lines(b"one\ntwo\n");
        lf.write_lines(b"three\n");
        assert_eq!((lf.lost.bytes, lf.lost.lines), (14, 3));
        assert!(lf.error.as_deref().unwrap().contains("No space left"));
        lf.file = open_private(&path, OpenMode::Append).unwrap();
        lf.write_lines(b"four\n");
        lf.write_lines(b"five\n");
        assert_eq!(lf.gap.bytes, 0);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "[mcsup: 14 bytes (3 lines) of output lost here: No space left on device (os error 28)]\nfour\nfive\n"
        );
        // Reported to the runtime: each loss as it happens, then the total at the end.
        drop(lf);
        let reports: Vec<(u64, u64, LossWhen)> =
            rx.try_iter().map(|l| (l.bytes, l.lines, l.when)).collect();
        assert_eq!(
            reports,
            [
                (8, 2, LossWhen::First),
                (6, 1, LossWhen::Again),
                (14, 3, LossWhen::End)
            ]
        );
    }
}
