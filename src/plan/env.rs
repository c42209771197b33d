//! Environment layering with provenance: later layers win, and every variable remembers which
//! layer set it and what it replaced. Mirrors srt-slurm's layering order (see `resolve`).

use std::collections::HashMap;

use super::spec::{EnvOverride, EnvVar};

/// Builds an ordered environment from layers.
#[derive(Debug, Default)]
pub struct EnvBuilder {
    vars: Vec<EnvVar>,
    /// Name → position in `vars` (a linear search made large env blocks quadratic).
    index: HashMap<String, usize>,
}

impl EnvBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Set `name` from layer `source`, recording what it replaced.
    pub fn set(&mut self, name: &str, value: impl Into<String>, source: &str) {
        let value = value.into();
        match self.index.get(name).map(|&i| &mut self.vars[i]) {
            Some(v) => {
                let old = std::mem::replace(&mut v.value, value);
                let old_source = std::mem::replace(&mut v.source, source.to_string());
                v.overrode.push(EnvOverride {
                    source: old_source,
                    value: old,
                });
            }
            None => {
                self.index.insert(name.to_string(), self.vars.len());
                self.vars.push(EnvVar {
                    name: name.to_string(),
                    value,
                    source: source.to_string(),
                    overrode: Vec::new(),
                })
            }
        }
    }

    /// Apply a whole layer.
    pub fn layer<'a>(&mut self, vars: impl IntoIterator<Item = (&'a str, String)>, source: &str) {
        for (k, v) in vars {
            self.set(k, v, source);
        }
    }

    pub fn get(&self, name: &str) -> Option<&EnvVar> {
        self.index.get(name).map(|&i| &self.vars[i])
    }

    /// The variables, sorted by name for stable output.
    pub fn build(mut self) -> Vec<EnvVar> {
        self.vars.sort_by(|a, b| a.name.cmp(&b.name));
        self.vars
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_layers_win_and_keep_history() {
        let mut b = EnvBuilder::new();
        b.set("A", "1", "role");
        b.set("B", "x", "role");
        b.set("A", "2", "shared");
        b.set("A", "3", "forced");
        let v = b.build();
        assert_eq!(v[0].name, "A");
        assert_eq!(v[0].value, "3");
        assert_eq!(v[0].source, "forced");
        assert_eq!(
            v[0].overrode,
            vec![
                EnvOverride {
                    source: "role".into(),
                    value: "1".into()
                },
                EnvOverride {
                    source: "shared".into(),
                    value: "2".into()
                }
            ]
        );
        assert!(v[1].overrode.is_empty());
    }
}
