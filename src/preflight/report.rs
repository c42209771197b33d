//! The preflight's result: a list of checks (ok / warn / fail / skip, message, fix) and the DRAM
//! budget, rendered as a grouped table or one JSON document. No I/O.

use std::fmt::Write as _;

use serde::Serialize;

use crate::mooncake::size::{decimal_gb, Bytes};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Skip,
    Warn,
    Fail,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Skip => "skip",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

/// One check's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// `rdma`, `memory`, `limits`, `ports`, `tools`.
    pub group: String,
    /// Short name, e.g. `gid index mlx5_0`.
    pub name: String,
    pub status: Status,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    fn new(
        status: Status,
        group: &str,
        name: &str,
        message: impl Into<String>,
        fix: Option<String>,
    ) -> Self {
        Check {
            group: group.into(),
            name: name.into(),
            status,
            message: message.into(),
            fix,
        }
    }
    pub fn ok(group: &str, name: &str, message: impl Into<String>) -> Self {
        Self::new(Status::Ok, group, name, message, None)
    }
    pub fn skip(group: &str, name: &str, message: impl Into<String>) -> Self {
        Self::new(Status::Skip, group, name, message, None)
    }
    pub fn warn(
        group: &str,
        name: &str,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self::new(Status::Warn, group, name, message, Some(fix.into()))
    }
    pub fn fail(
        group: &str,
        name: &str,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self::new(Status::Fail, group, name, message, Some(fix.into()))
    }
}

/// One line of the DRAM budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BudgetLine {
    pub item: String,
    pub bytes: u64,
    pub source: String,
}

/// Need versus available host memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Budget {
    pub need: Vec<BudgetLine>,
    pub need_total: u64,
    /// Each limit considered; the smallest wins.
    pub available: Vec<BudgetLine>,
    pub available_total: Option<u64>,
}

/// All checks for one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Report {
    pub node: String,
    pub checks: Vec<Check>,
    pub budget: Option<Budget>,
    /// Facts other tools aggregate across nodes (GID index, MTU, devices, memlock).
    pub facts: super::facts::Facts,
}

impl Report {
    pub fn push(&mut self, c: Check) {
        self.checks.push(c);
    }

    pub fn worst(&self) -> Status {
        self.checks
            .iter()
            .map(|c| c.status)
            .max()
            .unwrap_or(Status::Ok)
    }

    /// Pass unless something failed (or, `strict`, warned).
    pub fn passed(&self, strict: bool) -> bool {
        match self.worst() {
            Status::Fail => false,
            Status::Warn => !strict,
            _ => true,
        }
    }

    pub fn to_json(&self, strict: bool) -> String {
        #[derive(Serialize)]
        struct Doc<'a> {
            passed: bool,
            strict: bool,
            #[serde(flatten)]
            report: &'a Report,
        }
        serde_json::to_string_pretty(&Doc {
            passed: self.passed(strict),
            strict,
            report: self,
        })
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    pub fn to_human(&self, strict: bool) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "mcsup preflight on node {}", self.node);
        let mut groups: Vec<&str> = Vec::new();
        for c in &self.checks {
            if !groups.contains(&c.group.as_str()) {
                groups.push(&c.group);
            }
        }
        let name_w = self
            .checks
            .iter()
            .map(|c| c.name.len())
            .max()
            .unwrap_or(0)
            .min(32);
        for g in groups {
            let _ = writeln!(o, "\n[{g}]");
            for c in self.checks.iter().filter(|c| c.group == g) {
                let _ = writeln!(
                    o,
                    "  {:<4}  {:<name_w$}  {}",
                    c.status.label(),
                    c.name,
                    c.message
                );
                if let Some(fix) = &c.fix {
                    if c.status >= Status::Warn {
                        let _ = writeln!(o, "        {:<name_w$}  fix: {fix}", "");
                    }
                }
            }
        }
        if let Some(b) = &self.budget {
            let _ = writeln!(o, "\n[memory budget]");
            let w = b
                .need
                .iter()
                .chain(&b.available)
                .map(|l| l.item.len())
                .max()
                .unwrap_or(0);
            let _ = writeln!(o, "  need:");
            for l in &b.need {
                let _ = writeln!(
                    o,
                    "    {:<w$}  {:>12}  {:>11}  {}",
                    l.item,
                    Bytes(l.bytes).to_string(),
                    decimal_gb(l.bytes),
                    l.source
                );
            }
            let _ = writeln!(
                o,
                "    {:<w$}  {:>12}  {:>11}",
                "total",
                Bytes(b.need_total).to_string(),
                decimal_gb(b.need_total)
            );
            let _ = writeln!(o, "  available (the smallest limit counts):");
            for l in &b.available {
                let _ = writeln!(
                    o,
                    "    {:<w$}  {:>12}  {:>11}  {}",
                    l.item,
                    Bytes(l.bytes).to_string(),
                    decimal_gb(l.bytes),
                    l.source
                );
            }
            if let Some(a) = b.available_total {
                let _ = writeln!(
                    o,
                    "    {:<w$}  {:>12}  {:>11}",
                    "=> available",
                    Bytes(a).to_string(),
                    decimal_gb(a)
                );
            }
            let _ = writeln!(o, "  (GiB = 2^30 bytes as Mooncake's \"gb\"; GB = 10^9 bytes as SGLang's --hicache-size)");
        }
        let fails = self
            .checks
            .iter()
            .filter(|c| c.status == Status::Fail)
            .count();
        let warns = self
            .checks
            .iter()
            .filter(|c| c.status == Status::Warn)
            .count();
        let verdict = if self.passed(strict) { "PASS" } else { "FAIL" };
        let _ = writeln!(
            o,
            "\n{verdict}: {fails} failed, {warns} warnings{}",
            if strict {
                " (strict: warnings fail)"
            } else {
                ""
            }
        );
        o
    }
}
