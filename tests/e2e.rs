//! The end-to-end tests with real outside programs (Mooncake's master and store, etcd, NATS,
//! Dynamo, SGLang's router), as one binary; each file of `tests/` named below is one module.

mod common;

mod e2e_canary;
mod e2e_engine_stop;
mod e2e_fatal_markers;
mod e2e_master_recovery;
mod e2e_mooncake;
mod e2e_mooncake_truth;
mod e2e_services;
mod e2e_store_close;
