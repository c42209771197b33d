//! vLLM's own server as the frontend (srtctl's `frontends/vllm.py`): the one aggregated
//! `vllm serve` worker binds the public port itself; no frontend process, no nginx.

use super::{FrontendJob, FrontendKind, FrontendLaunch, FrontendSettings, Seen};

/// `frontend.type: vllm`.
#[derive(Debug)]
pub struct VllmServe;

impl FrontendKind for VllmServe {
    fn name(&self) -> &'static str {
        "vllm"
    }

    fn head_infrastructure(&self) -> bool {
        false
    }

    fn health_path(&self) -> &'static str {
        "/v1/models"
    }

    /// Servable when it lists a model (one aggregated worker).
    fn parse_health(&self, v: &serde_json::Value) -> Result<Seen, String> {
        let models = v
            .get("data")
            .and_then(|d| d.as_array())
            .ok_or("no `data` list")?;
        Ok(Seen {
            prefill: 0,
            decode: u32::from(!models.is_empty()),
        })
    }

    fn launch(
        &self,
        _s: &FrontendSettings,
        _idx: usize,
        _port: u16,
        _job: &FrontendJob<'_>,
    ) -> Option<FrontendLaunch> {
        None
    }

    fn dynamo_workers(&self) -> bool {
        false
    }

    fn worker_serves(&self) -> bool {
        true
    }
}
