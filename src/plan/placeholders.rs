//! Literal placeholders (`{node}`, `{node_ip}`, `{infra_ip}`, ...) as srtctl renders them:
//! `str.replace("{key}", value)` for known keys only, so JSON braces in values survive. Applied to
//! argv, env values and preambles.
//!
//! Keys: `node node_ip node_id index role head_node head_ip infra_node infra_ip master_port
//! metadata_port`, the per-worker `worker_*` keys, and mcsup's own `job_id`, `log_dir`,
//! `scratch_dir`.

use crate::node::NodeContext;

/// Values for the placeholders of one instance.
#[derive(Debug, Clone)]
pub struct Placeholders {
    pairs: Vec<(String, String)>,
}

impl Placeholders {
    /// The node-wide keys.
    pub fn new(ctx: &NodeContext, rpc: u16, meta: u16, log_dir: &std::path::Path) -> Self {
        let pairs = [
            ("node", ctx.name.clone()),
            ("node_ip", ctx.ip.clone()),
            ("node_id", ctx.node_id.to_string()),
            ("head_node", ctx.infra_node.clone()),
            ("head_ip", ctx.infra_ip.clone()),
            ("infra_node", ctx.infra_node.clone()),
            ("infra_ip", ctx.infra_ip.clone()),
            ("master_port", rpc.to_string()),
            ("metadata_port", meta.to_string()),
            (
                "job_id",
                ctx.job_id.clone().unwrap_or_else(|| "local".into()),
            ),
            ("log_dir", log_dir.display().to_string()),
            ("scratch_dir", ctx.scratch_dir.display().to_string()),
        ];
        Placeholders {
            pairs: pairs
                .into_iter()
                .map(|(k, v)| (format!("{{{k}}}"), v))
                .collect(),
        }
    }

    /// Add or replace one key.
    pub fn with(&self, key: &str, value: impl Into<String>) -> Self {
        let mut p = self.clone();
        let k = format!("{{{key}}}");
        p.pairs.retain(|(x, _)| *x != k);
        p.pairs.push((k, value.into()));
        p
    }

    /// `{role}` and `{index}` of an instance.
    pub fn instance(&self, role: &str, index: u32) -> Self {
        self.with("role", role).with("index", index.to_string())
    }

    /// Literal replacement (not format!): JSON braces in values survive.
    pub fn apply(&self, s: &str) -> String {
        let mut out = s.to_string();
        for (k, v) in &self.pairs {
            if out.contains(k.as_str()) {
                out = out.replace(k.as_str(), v);
            }
        }
        out
    }

    pub fn apply_all(&self, words: &[String]) -> Vec<String> {
        words.iter().map(|w| self.apply(w)).collect()
    }
}
