//! TRT-LLM's own server as the frontend (srtctl's `frontends/trtllm_serve.py`): the endpoints
//! run `trtllm-serve`, and a disaggregated job's orchestrator (`trtllm-serve disaggregated`)
//! fronts them; the TRT-LLM engine plans both (`engine::trtllm`).

use super::{FrontendJob, FrontendKind, FrontendLaunch, FrontendSettings, Seen};

/// `frontend.type: trtllm_serve`.
#[derive(Debug)]
pub struct TrtllmServe;

impl FrontendKind for TrtllmServe {
    fn name(&self) -> &'static str {
        "trtllm_serve"
    }

    fn planned_by_engine(&self) -> Option<(&'static str, &'static str)> {
        Some(("trtllm", "TRT-LLM"))
    }

    fn head_infrastructure(&self) -> bool {
        false
    }

    fn health_path(&self) -> &'static str {
        "/health"
    }

    /// Its readiness is its own `/health` (no servable probe reads it).
    fn parse_health(&self, _v: &serde_json::Value) -> Result<Seen, String> {
        Err("trtllm_serve's /health lists no workers".into())
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
}
