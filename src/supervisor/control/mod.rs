//! The job's control connection between the nodes' mcsups (docs/supervision.md, "Across
//! nodes"): `wire` (messages and their HMAC), `coordinator` (the infra node's decisions).
pub mod coordinator;
pub mod net;
pub mod wire;
