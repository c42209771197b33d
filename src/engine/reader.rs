//! Reading an engine's or a frontend's settings from the recipe as srtctl's marshmallow schema
//! loads them (`"2.5"` is a float, `"no"` a boolean), with errors naming `<section>.<key>`. Pure.

use crate::domain::{plan_err, PlanError};
use crate::recipe::Recipe;

/// One setting's value as marshmallow would load it, or an error naming the key.
pub struct Reader<'a> {
    pub recipe: &'a Recipe,
    /// The recipe section read (`backend`, `engine`, `frontend`).
    pub section: &'static str,
}

impl Reader<'_> {
    pub fn raw(&self, key: &str) -> Option<&serde_yaml::Value> {
        self.recipe
            .raw_get(&[self.section, key])
            .filter(|v| !v.is_null())
    }

    pub fn bad(&self, key: &str, v: &serde_yaml::Value, want: &str, example: &str) -> PlanError {
        let shown = serde_yaml::to_string(v).unwrap_or_default();
        plan_err(
            format!("{}.{key}", self.section),
            format!("`{}` is not {want}", shown.trim()),
            format!("write {key}: {example}"),
        )
    }

    pub fn float(&self, key: &str) -> Result<Option<f64>, PlanError> {
        let Some(v) = self.raw(key) else {
            return Ok(None);
        };
        let f = match v {
            serde_yaml::Value::Number(n) => n.as_f64(),
            serde_yaml::Value::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        match f.filter(|f| f.is_finite()) {
            Some(f) => Ok(Some(f)),
            None => Err(self.bad(key, v, "a number", "100")),
        }
    }

    pub fn int(&self, key: &str) -> Result<Option<i64>, PlanError> {
        let Some(v) = self.raw(key) else {
            return Ok(None);
        };
        let i = match v {
            serde_yaml::Value::Number(n) => n.as_i64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                    .map(|f| f as i64)
            }),
            serde_yaml::Value::String(s) => s.trim().parse::<i64>().ok(),
            _ => None,
        };
        match i {
            Some(i) => Ok(Some(i)),
            None => Err(self.bad(key, v, "a whole number", "256")),
        }
    }

    pub fn string(&self, key: &str) -> Result<Option<String>, PlanError> {
        match self.raw(key) {
            None => Ok(None),
            Some(serde_yaml::Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(self.bad(key, v, "a string", "\"vllm\"")),
        }
    }

    pub fn boolean(&self, key: &str) -> Result<Option<bool>, PlanError> {
        let Some(v) = self.raw(key) else {
            return Ok(None);
        };
        // marshmallow's Boolean: its truthy and falsy spellings.
        let b = match v {
            serde_yaml::Value::Bool(b) => Some(*b),
            serde_yaml::Value::Number(n) => match n.as_i64() {
                Some(1) => Some(true),
                Some(0) => Some(false),
                _ => None,
            },
            serde_yaml::Value::String(s) => match s.to_ascii_lowercase().as_str() {
                "t" | "true" | "on" | "y" | "yes" | "1" => Some(true),
                "f" | "false" | "off" | "n" | "no" | "0" => Some(false),
                _ => None,
            },
            _ => None,
        };
        match b {
            Some(b) => Ok(Some(b)),
            None => Err(self.bad(key, v, "true or false", "false")),
        }
    }
}
