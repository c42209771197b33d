//! What mcsup knows about Mooncake itself: default ports and master tunables, the variables its
//! processes read, the size strings it parses, and the store-service command.
//!
//! Facts only, no I/O: the planner, the preflight and the renderer read them from here so that a
//! Mooncake detail lives in one place. Each fact names its source in kvcache-ai/Mooncake (file,
//! and the release or commit it was read at).

pub mod gid;
pub mod remount;
pub mod segments;
pub mod signatures;
pub mod size;

/// srt-slurm's master ports: RPC, HTTP metadata server, metrics/admin.
pub const DEFAULT_RPC_PORT: u16 = 8700;
pub const DEFAULT_METADATA_PORT: u16 = 8701;
pub const DEFAULT_METRICS_PORT: u16 = 8702;

/// The master tunables srt-slurm passes and that the seed's `master_args` replaces.
pub const DEFAULT_MASTER_TUNABLES: [&str; 3] = [
    "--eviction_high_watermark_ratio=0.9",
    "--default_kv_lease_ttl=10000",
    "--rpc_thread_num=16",
];

/// The master program (from the Mooncake wheel).
pub const MASTER_PROGRAM: &str = "mooncake_master";

/// The master's argv before its tunables: the program (`command`, else [`MASTER_PROGRAM`]) and
/// the ports mcsup manages, `[rpc, metadata, metrics]`, with the HTTP metadata server and metric
/// reporting on.
pub fn master_argv(command: Option<&[String]>, [rpc, meta, metrics]: [u16; 3]) -> Vec<String> {
    let mut argv = command.map_or_else(|| vec![MASTER_PROGRAM.to_string()], <[String]>::to_vec);
    argv.extend([
        format!("--rpc_port={rpc}"),
        "--enable_http_metadata_server=true".into(),
        format!("--http_metadata_server_port={meta}"),
        "--enable_metric_reporting=true".into(),
        format!("--metrics_port={metrics}"),
    ]);
    argv
}

/// `python -m mooncake.mooncake_store_service`: the standalone store's default command.
pub const STORE_COMMAND: [&str; 3] = ["python", "-m", "mooncake.mooncake_store_service"];

/// The store service's REST port when `--port` is not given.
pub const STORE_DEFAULT_REST_PORT: u16 = 8080;

/// Mooncake's store-service segment default when the variable is unset (3.125 GiB).
pub const DEFAULT_SEGMENT: u64 = 3_355_443_200;
/// Mooncake allocates segments in 16 MiB chunks and rejects smaller ones.
pub const MIN_STORE_SEGMENT: u64 = 16 << 20;

/// Variables Mooncake clients read (names only; values are the user's).
pub mod env {
    pub const MASTER: &str = "MOONCAKE_MASTER";
    pub const METADATA_SERVER: &str = "MOONCAKE_TE_META_DATA_SERVER";
    pub const LOCAL_HOSTNAME: &str = "MOONCAKE_LOCAL_HOSTNAME";
    pub const GLOBAL_SEGMENT_SIZE: &str = "MOONCAKE_GLOBAL_SEGMENT_SIZE";
    pub const LOCAL_BUFFER_SIZE: &str = "MOONCAKE_LOCAL_BUFFER_SIZE";
    pub const PROTOCOL: &str = "MOONCAKE_PROTOCOL";
    pub const DEVICE: &str = "MOONCAKE_DEVICE";
    pub const CONFIG_PATH: &str = "MOONCAKE_CONFIG_PATH";
    /// vLLM (0.33): the address its Mooncake store worker registers as. vLLM does not read the
    /// config file's `local_hostname`; without this it uses its own `get_ip()` (`VLLM_HOST_IP`,
    /// else the interface of the default route), which on a multi-NIC node may not be the
    /// address the rest of the node's Mooncake clients advertise.
    pub const REQUESTER_LOCAL_HOSTNAME: &str = "MOONCAKE_REQUESTER_LOCAL_HOSTNAME";
    /// Transfer-engine bind address (mcsup's default: the node's address).
    pub const TCP_BIND_ADDRESS: &str = "MC_TCP_BIND_ADDRESS";
}

/// The path MTU Mooncake's RDMA endpoints use: min(the port's active MTU, `MC_MTU`, 4096)
/// (`rdma_endpoint.cpp` INIT→RTR; peers do not exchange it). `MC_MTU` counts only when it is
/// 512, 1024, 2048 or 4096; otherwise Mooncake logs an error and ignores it, and the second
/// value says so.
pub fn path_mtu(active_bytes: u32, mc_mtu: Option<&str>) -> (u32, Option<String>) {
    let cap = match mc_mtu.map(str::trim) {
        None => 4096,
        Some(v) => match v.parse::<u32>() {
            Ok(n) if [512, 1024, 2048, 4096].contains(&n) => n,
            _ => {
                return (
                    active_bytes.min(4096),
                    Some(format!("MC_MTU={v} is not 512, 1024, 2048 or 4096: Mooncake logs an error and ignores it")),
                )
            }
        },
    };
    (active_bytes.min(cap), None)
}

/// `host:port` of the master's RPC server.
pub fn master_address(host: &str, rpc_port: u16) -> String {
    format!("{host}:{rpc_port}")
}

/// Is this `MOONCAKE_MASTER` an HA address (`etcd://h1:2379;h2:2379`, `redis://...`)? Clients
/// then find the leader through the backend (`master_client.cpp`, Mooncake's deployment guide
/// §HA), so the address must reach them as written.
pub fn is_ha_master_address(value: &str) -> bool {
    let v = value.trim_start().to_ascii_lowercase();
    v.starts_with("etcd://") || v.starts_with("redis://") || v.starts_with("k8s://")
}

/// The URL of the master's embedded HTTP metadata server. An IPv6 address goes in brackets, as
/// a URL's host must (`http://[fd00::1]:8701/metadata`; without them the port cannot be told
/// from the address).
pub fn metadata_url(host: &str, metadata_port: u16) -> String {
    if host.parse::<std::net::Ipv6Addr>().is_ok() {
        format!("http://[{host}]:{metadata_port}/metadata")
    } else {
        format!("http://{host}:{metadata_port}/metadata")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_ipv6_master_gets_brackets_in_its_metadata_url() {
        use super::metadata_url;
        assert_eq!(
            metadata_url("fd00::1", 8701),
            "http://[fd00::1]:8701/metadata"
        );
        assert_eq!(metadata_url("::1", 1), "http://[::1]:1/metadata");
        assert_eq!(
            metadata_url("10.0.0.1", 8701),
            "http://10.0.0.1:8701/metadata"
        );
        assert_eq!(metadata_url("gpu-01", 8701), "http://gpu-01:8701/metadata");
    }

    #[test]
    fn path_mtu_is_the_smallest_of_active_mc_mtu_and_4096() {
        assert_eq!(super::path_mtu(4096, None), (4096, None));
        assert_eq!(super::path_mtu(4096, Some("1024")), (1024, None));
        assert_eq!(super::path_mtu(1024, Some("4096")), (1024, None));
        let (m, note) = super::path_mtu(2048, Some("9000"));
        assert_eq!(m, 2048);
        assert!(note.unwrap().contains("ignores it"));
    }
}
