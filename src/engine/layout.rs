//! Where srtctl puts the workers: which GPUs of which nodes each worker (endpoint) gets, one
//! process per (endpoint, node), and the ports each process gets — so that mcsup starts, on
//! every node, exactly the worker processes srtctl would start there.
//!
//! This reproduces srt-slurm v1's `core/topology.py` (`allocate_endpoints` with its
//! `allocate_workers_simple`, `endpoints_to_processes`, `NodePortAllocator`) and the sizes
//! `ResourceConfig` derives (NVIDIA/srt-slurm main @ c88ef731), quirks included: GPUs per
//! worker come from the worker counts, never from the recipe's TP size; decode starts on a fresh
//! node unless none is left; ports are global or per node as srtctl allocates them. The inputs
//! come from v1 `resources:` or 2.0 `roles.<role>.{nodes,workers,gpus}`. Pure.

use std::collections::HashMap;

use crate::domain::Role;
use crate::domain::{plan_err as err, PlanError};
use crate::recipe::Recipe;

/// srtctl's base ports (`srtctl/ports.py`).
pub mod ports {
    pub const DYN_SYSTEM: u16 = 7500;
    pub const HTTP: u16 = 6100;
    pub const HTTP_STRIDE: u16 = 32;
    pub const BOOTSTRAP: u16 = 7200;
    pub const DIST_INIT: u16 = 8300;
    pub const NCCL: u16 = 17500;
    pub const KV_EVENTS: u16 = 5200;
    pub const NIXL: u16 = 5400;
    pub const DP_RPC: u16 = 8400;
    pub const ETCD: u16 = 2379;
    pub const NATS: u16 = 4222;
}

/// One role's worker count and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RoleSize {
    pub workers: u32,
    pub gpus_per_worker: u32,
}

/// What the allocation needs from the recipe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyInputs {
    pub gpus_per_node: u32,
    pub prefill: RoleSize,
    pub decode: RoleSize,
    pub agg: RoleSize,
    pub spread_workers: bool,
    /// vLLM's `allow_prefill_decode_colocation` (as `should_colocate_prefill_decode` decides).
    pub pd_colocation: bool,
    /// Where the sizes came from (`resources`, `roles`), for messages.
    pub source: &'static str,
}

impl TopologyInputs {
    /// The GPUs of every worker of every role.
    pub fn worker_gpus(&self) -> u32 {
        Role::ALL
            .iter()
            .map(|r| self.size(*r).workers * self.size(*r).gpus_per_worker)
            .sum()
    }

    pub fn size(&self, role: Role) -> RoleSize {
        match role {
            Role::Prefill => self.prefill,
            Role::Decode => self.decode,
            Role::Aggregated => self.agg,
        }
    }
}

/// One worker (an engine instance), possibly over several nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub mode: Role,
    pub index: u32,
    /// Indexes into the worker node list.
    pub nodes: Vec<usize>,
    pub gpus: Vec<u32>,
}

/// One process of an endpoint on one node, with srtctl's ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopoProcess {
    pub mode: Role,
    pub index: u32,
    /// Index into the worker node list.
    pub node: usize,
    /// All nodes of the endpoint (the first is the leader).
    pub endpoint_nodes: Vec<usize>,
    pub node_rank: u32,
    pub gpus: Vec<u32>,
    /// `DYN_SYSTEM_PORT` (global counter: 7500 + the process's position in the job).
    pub sys_port: u16,
    /// The server port (`--port`): per node from 6100 in steps of 32; 0 on followers.
    pub http_port: u16,
    /// Prefill only: per leader node from 7200, shared by the endpoint's processes.
    pub bootstrap_port: Option<u16>,
    pub kv_events_port: u16,
    pub nixl_port: u16,
    /// vLLM data parallelism: the endpoint's DP RPC port (per leader node from 8400).
    pub dp_rpc_port: Option<u16>,
}

impl TopoProcess {
    pub fn is_leader(&self) -> bool {
        self.node_rank == 0
    }

    /// This process's node's position among the endpoint's nodes (0 on the first).
    pub fn rank_in_endpoint(&self) -> usize {
        self.endpoint_nodes
            .iter()
            .position(|n| *n == self.node)
            .unwrap_or(0)
    }

    /// `0,1` — srtctl's `cuda_visible_devices`.
    pub fn cuda_visible_devices(&self) -> String {
        crate::domain::gpu_list(&self.gpus)
    }
}

/// A count as srtctl's `int` fields take it (2.0's `colocate`: none of its own), at `key`.
pub(crate) fn num(v: Option<&serde_yaml::Value>, key: &str) -> Result<Option<u32>, PlanError> {
    match v {
        None => Ok(None),
        Some(serde_yaml::Value::Number(n)) => {
            match n.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => Ok(Some(n)),
                None => Err(err(
                    key,
                    format!("`{n}` is not a whole number of nodes, workers or GPUs"),
                    "write a whole number, 0 or more",
                )),
            }
        }
        Some(serde_yaml::Value::String(s)) if s == "colocate" => Ok(Some(0)),
        Some(other) => Err(err(
            key,
            format!("expected a whole number, found {other:?}"),
            "write a whole number, 0 or more",
        )),
    }
}

/// A role's (nodes, workers, explicit GPUs per worker), each as the recipe gives it.
type RoleCounts = (Option<u32>, Option<u32>, Option<u32>);
type RoleCountsFn<'a> = Box<dyn Fn(Role) -> Result<RoleCounts, PlanError> + 'a>;

/// The sizes, as srtctl's `ResourceConfig` derives them; `None` when the recipe gives no
/// worker counts (mcsup then runs one worker per role, as before).
pub fn inputs(recipe: &Recipe) -> Result<Option<TopologyInputs>, PlanError> {
    let res = |k: &str| recipe.raw_get(&["resources", k]);
    let gpus_per_node = num(res("gpus_per_node"), "resources.gpus_per_node")?.unwrap_or(4);
    if gpus_per_node == 0 {
        return Err(err(
            "resources.gpus_per_node",
            "gpus_per_node is 0",
            "give the GPUs of one node, e.g. 8",
        ));
    }
    // (nodes, workers, explicit gpus) per role, from 2.0 roles or v1 resources.
    let (source, get): (&'static str, RoleCountsFn<'_>) = if recipe.roles.is_some() {
        (
            "roles",
            Box::new(|role: Role| {
                let name = role.short();
                let k = |f: &str| recipe.raw_get(&["roles", name, f]);
                Ok((
                    num(k("nodes"), &format!("roles.{name}.nodes"))?,
                    num(k("workers"), &format!("roles.{name}.workers"))?,
                    num(k("gpus"), &format!("roles.{name}.gpus"))?,
                ))
            }),
        )
    } else {
        (
            "resources",
            Box::new(|role: Role| {
                let name = role.short();
                Ok((
                    num(
                        res(&format!("{name}_nodes")),
                        &format!("resources.{name}_nodes"),
                    )?,
                    num(
                        res(&format!("{name}_workers")),
                        &format!("resources.{name}_workers"),
                    )?,
                    num(
                        res(&format!("gpus_per_{name}")),
                        &format!("resources.gpus_per_{name}"),
                    )?,
                ))
            }),
        )
    };
    let (pn, pw, pg) = get(Role::Prefill)?;
    let (dn, dw, dg) = get(Role::Decode)?;
    let (an, aw, ag) = get(Role::Aggregated)?;
    if pw.is_none() && dw.is_none() && aw.is_none() {
        return Ok(None);
    }
    // ResourceConfig: an explicit size wins, then nodes * gpus_per_node // workers (floor),
    // then (decode on no nodes of its own) the prefill size, then a whole node.
    let derive = |explicit: Option<u32>, nodes: Option<u32>, workers: Option<u32>| -> u32 {
        explicit.unwrap_or(match (nodes, workers) {
            (Some(n), Some(w)) if n > 0 && w > 0 => n * gpus_per_node / w,
            _ => gpus_per_node,
        })
    };
    let gpus_prefill = derive(pg, pn, pw);
    let gpus_decode = match (dg, dn, dw) {
        (None, Some(0), Some(_)) => gpus_prefill,
        _ => derive(dg, dn, dw),
    };
    let spread = recipe
        .raw_get(&["resources", "spread_workers"])
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    let t = TopologyInputs {
        gpus_per_node,
        prefill: RoleSize {
            workers: pw.unwrap_or(0),
            gpus_per_worker: gpus_prefill,
        },
        decode: RoleSize {
            workers: dw.unwrap_or(0),
            gpus_per_worker: gpus_decode,
        },
        agg: RoleSize {
            workers: aw.unwrap_or(0),
            gpus_per_worker: derive(ag, an, aw),
        },
        spread_workers: spread,
        pd_colocation: false,
        source,
    };
    for role in Role::ALL {
        let s = t.size(role);
        if s.workers > 0 && s.gpus_per_worker == 0 {
            return Err(err(
                source.to_string(),
                format!("{role} workers would get 0 GPUs each (nodes x gpus_per_node < workers)"),
                "give more nodes, fewer workers, or an explicit GPU count per worker",
            ));
        }
    }
    Ok(Some(t))
}

/// srtctl's `allocate_endpoints` over `n_nodes` worker nodes.
pub fn allocate(t: &TopologyInputs, n_nodes: usize) -> Result<Vec<Endpoint>, PlanError> {
    let gpn = t.gpus_per_node;
    let mut node_idx = 0usize;
    let mut gpu_offset = 0u32;
    let mut out = Vec::new();
    let short = |need: usize| {
        err(
            t.source,
            format!("the workers need at least {need} worker nodes, but the job's node list has {n_nodes}"),
            "give the job more nodes (sbatch --nodes / the node list) or fewer workers",
        )
    };
    for role in Role::ALL {
        let size = t.size(role);
        if size.workers == 0 {
            continue;
        }
        if role == Role::Decode && !t.pd_colocation && gpu_offset > 0 && node_idx + 1 < n_nodes {
            node_idx += 1;
            gpu_offset = 0;
        }
        let g = size.gpus_per_worker;
        let nodes_per_worker = g.div_ceil(gpn) as usize;
        for index in 0..size.workers {
            if g >= gpn {
                if node_idx + nodes_per_worker > n_nodes {
                    return Err(short(node_idx + nodes_per_worker));
                }
                out.push(Endpoint {
                    mode: role,
                    index,
                    nodes: (node_idx..node_idx + nodes_per_worker).collect(),
                    gpus: (0..gpn).collect(),
                });
                node_idx += nodes_per_worker;
            } else {
                if gpu_offset + g > gpn {
                    node_idx += 1;
                    gpu_offset = 0;
                }
                if node_idx >= n_nodes {
                    return Err(short(node_idx + 1));
                }
                out.push(Endpoint {
                    mode: role,
                    index,
                    nodes: vec![node_idx],
                    gpus: (gpu_offset..gpu_offset + g).collect(),
                });
                gpu_offset += g;
                if gpu_offset >= gpn || t.spread_workers {
                    node_idx += 1;
                    gpu_offset = 0;
                }
            }
        }
    }
    Ok(out)
}

/// srtctl's `NodePortAllocator`: per-node HTTP, bootstrap and DP-RPC ports, global kv-events
/// and NIXL ports, and the global system-port counter.
#[derive(Debug, Default)]
pub struct PortAllocator {
    http: HashMap<usize, u16>,
    bootstrap: HashMap<usize, u16>,
    dp_rpc: HashMap<usize, u16>,
    kv: u16,
    nixl: u16,
    sys: u16,
}

fn next_on(map: &mut HashMap<usize, u16>, node: usize, base: u16, step: u16) -> u16 {
    let p = map.entry(node).or_insert(base);
    let port = *p;
    *p = p.saturating_add(step);
    port
}

impl PortAllocator {
    fn http(&mut self, node: usize) -> u16 {
        next_on(&mut self.http, node, ports::HTTP, ports::HTTP_STRIDE)
    }
    fn bootstrap(&mut self, node: usize) -> u16 {
        next_on(&mut self.bootstrap, node, ports::BOOTSTRAP, 1)
    }
    fn dp_rpc(&mut self, node: usize) -> u16 {
        next_on(&mut self.dp_rpc, node, ports::DP_RPC, 1)
    }
    fn kv_block(&mut self, size: u16) -> u16 {
        if self.kv == 0 {
            self.kv = ports::KV_EVENTS;
        }
        let p = self.kv;
        self.kv = self.kv.saturating_add(size);
        p
    }
    fn nixl_block(&mut self, size: u16) -> u16 {
        if self.nixl == 0 {
            self.nixl = ports::NIXL;
        }
        let p = self.nixl;
        self.nixl = self.nixl.saturating_add(size);
        p
    }
    fn sys(&mut self) -> u16 {
        if self.sys == 0 {
            self.sys = ports::DYN_SYSTEM;
        }
        let p = self.sys;
        self.sys = self.sys.saturating_add(1);
        p
    }

    /// srtctl's generic `endpoints_to_processes` for one endpoint: a process per node.
    fn generic(&mut self, e: &Endpoint, out: &mut Vec<TopoProcess>) {
        let boot = (e.mode == Role::Prefill).then(|| self.bootstrap(e.nodes[0]));
        for (rank, &node) in e.nodes.iter().enumerate() {
            let http_port = if rank == 0 { self.http(node) } else { 0 };
            let (kv, nixl) = (self.kv_block(1), self.nixl_block(1));
            out.push(TopoProcess {
                mode: e.mode,
                index: e.index,
                node,
                endpoint_nodes: e.nodes.clone(),
                node_rank: rank as u32,
                gpus: e.gpus.clone(),
                sys_port: self.sys(),
                http_port,
                bootstrap_port: boot,
                kv_events_port: kv,
                nixl_port: nixl,
                dp_rpc_port: None,
            });
        }
    }
}

/// srtctl's `endpoints_to_processes` with a fresh `NodePortAllocator`: one process per
/// (endpoint, node), in allocation order (SGLang, and vLLM without data parallelism).
pub fn processes(endpoints: &[Endpoint]) -> Vec<TopoProcess> {
    let mut ports = PortAllocator::default();
    let mut out = Vec::new();
    for e in endpoints {
        ports.generic(e, &mut out);
    }
    out
}

/// A vLLM mode's parallelism (`data-parallel-size`, TP x PP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VllmDp {
    /// `None`: the recipe sets no data-parallel-size (not a DP mode).
    pub dp_size: Option<u32>,
    /// tensor-parallel-size x pipeline-parallel-size.
    pub replica: u32,
}

/// srtctl's `VLLMProtocol.endpoints_to_processes`: the generic layout for the direct vLLM
/// frontend and for modes without data parallelism; with it, one process per node owning its
/// local DP ranks (`per_node`, `node_rank` = the DP start rank) or one per GPU (`per_gpu`,
/// `node_rank` = the DP rank).
pub fn vllm_processes(
    endpoints: &[Endpoint],
    dp_of: &dyn Fn(Role) -> VllmDp,
    per_node: bool,
    direct: bool,
) -> Result<Vec<TopoProcess>, PlanError> {
    let mut ports = PortAllocator::default();
    let mut out = Vec::new();
    let any_dp = endpoints.iter().any(|e| dp_of(e.mode).dp_size.is_some());
    for e in endpoints {
        let dp = dp_of(e.mode);
        let total = e.gpus.len() as u32 * e.nodes.len() as u32;
        match (direct || !any_dp, dp.dp_size) {
            (true, _) | (false, None) => ports.generic(e, &mut out),
            (false, Some(dp_size)) if per_node => {
                let replica = dp.replica.max(1);
                let dp_size = if dp_size == 0 {
                    total / replica
                } else {
                    dp_size
                };
                let key = e.mode.short().to_string();
                if dp_size * replica != total {
                    return Err(err(
                        key,
                        format!("{} data-parallel-size={dp_size} x TP x PP {replica} need {} GPUs, but the worker has {total}", e.mode, dp_size * replica),
                        "make data-parallel-size x tensor-parallel-size x pipeline-parallel-size equal the worker's GPUs",
                    ));
                }
                let local = e.gpus.len() as u32;
                if replica > local {
                    ports.generic(e, &mut out);
                    continue;
                }
                if local % replica != 0 {
                    return Err(err(key, format!("{} TP x PP replica size {replica} does not divide the node's {local} GPUs", e.mode), "pick a TP x PP that divides the GPUs per node"));
                }
                let local_dp = local / replica;
                let rpc = ports.dp_rpc(e.nodes[0]);
                let nixl = ports.nixl_block(u16::try_from(dp_size).unwrap_or(u16::MAX));
                let mut start = 0u32;
                for &node in &e.nodes {
                    let http_port = ports.http(node);
                    let boot = (e.mode == Role::Prefill).then(|| ports.bootstrap(node));
                    let kv = ports.kv_block(u16::try_from(local_dp).unwrap_or(u16::MAX));
                    out.push(TopoProcess {
                        mode: e.mode,
                        index: e.index,
                        node,
                        endpoint_nodes: e.nodes.clone(),
                        node_rank: start,
                        gpus: e.gpus.clone(),
                        sys_port: ports.sys(),
                        http_port,
                        bootstrap_port: boot,
                        kv_events_port: kv,
                        nixl_port: nixl,
                        dp_rpc_port: Some(rpc),
                    });
                    start += local_dp;
                }
            }
            (false, Some(dp_size)) => {
                let rpc = ports.dp_rpc(e.nodes[0]);
                let size = if dp_size == 0 { total } else { dp_size };
                let nixl = ports.nixl_block(u16::try_from(size).unwrap_or(u16::MAX));
                let mut rank = 0u32;
                for &node in &e.nodes {
                    for &gpu in &e.gpus {
                        let leader = rank == 0;
                        let http_port = if leader { ports.http(node) } else { 0 };
                        let boot =
                            (e.mode == Role::Prefill && leader).then(|| ports.bootstrap(node));
                        let kv = ports.kv_block(1);
                        out.push(TopoProcess {
                            mode: e.mode,
                            index: e.index,
                            node,
                            endpoint_nodes: e.nodes.clone(),
                            node_rank: rank,
                            gpus: vec![gpu],
                            sys_port: ports.sys(),
                            http_port,
                            bootstrap_port: boot,
                            kv_events_port: kv,
                            nixl_port: nixl,
                            dp_rpc_port: Some(rpc),
                        });
                        rank += 1;
                    }
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(gpn: u32, p: (u32, u32), d: (u32, u32), a: (u32, u32)) -> TopologyInputs {
        let s = |(workers, gpus_per_worker)| RoleSize {
            workers,
            gpus_per_worker,
        };
        TopologyInputs {
            gpus_per_node: gpn,
            prefill: s(p),
            decode: s(d),
            agg: s(a),
            spread_workers: false,
            pd_colocation: false,
            source: "resources",
        }
    }

    fn layout(eps: &[Endpoint]) -> Vec<(Role, u32, Vec<usize>, Vec<u32>)> {
        eps.iter()
            .map(|e| (e.mode, e.index, e.nodes.clone(), e.gpus.clone()))
            .collect()
    }

    #[test]
    fn srtctl_docstring_example() {
        // 2 prefill x 8 GPUs, 4 decode x 4 GPUs on 4 nodes of 8 GPUs.
        let eps = allocate(&t(8, (2, 8), (4, 4), (0, 8)), 4).unwrap();
        let all: Vec<u32> = (0..8).collect();
        assert_eq!(
            layout(&eps),
            vec![
                (Role::Prefill, 0, vec![0], all.clone()),
                (Role::Prefill, 1, vec![1], all),
                (Role::Decode, 0, vec![2], vec![0, 1, 2, 3]),
                (Role::Decode, 1, vec![2], vec![4, 5, 6, 7]),
                (Role::Decode, 2, vec![3], vec![0, 1, 2, 3]),
                (Role::Decode, 3, vec![3], vec![4, 5, 6, 7]),
            ]
        );
    }

    #[test]
    fn decode_shares_the_last_prefill_node_only_when_no_node_is_left() {
        // 6P x 2 + 2D x 2 on 2 nodes: P0..P3 on node 0, P4 P5 D0 D1 on node 1.
        let eps = allocate(&t(8, (6, 2), (2, 2), (0, 8)), 2).unwrap();
        assert_eq!(eps[4].nodes, vec![1]);
        assert_eq!(eps[6].nodes, vec![1]);
        assert_eq!(eps[6].gpus, vec![4, 5]);
        // With a third node, decode moves there.
        let eps = allocate(&t(8, (6, 2), (2, 2), (0, 8)), 3).unwrap();
        assert_eq!(eps[6].nodes, vec![2]);
        assert_eq!(eps[6].gpus, vec![0, 1]);
    }

    #[test]
    fn multi_node_workers_and_ports() {
        // TP16 prefill over two 8-GPU nodes, two TP16 decodes.
        let eps = allocate(&t(8, (1, 16), (2, 16), (0, 8)), 6).unwrap();
        assert_eq!(eps[0].nodes, vec![0, 1]);
        assert_eq!(eps[2].nodes, vec![4, 5]);
        let ps = processes(&eps);
        assert_eq!(ps.len(), 6);
        assert_eq!((ps[0].http_port, ps[1].http_port), (6100, 0));
        assert_eq!(
            (ps[0].bootstrap_port, ps[1].bootstrap_port),
            (Some(7200), Some(7200))
        );
        assert_eq!(ps[2].bootstrap_port, None);
        assert_eq!(
            ps.iter().map(|p| p.sys_port).collect::<Vec<_>>(),
            vec![7500, 7501, 7502, 7503, 7504, 7505]
        );
        assert_eq!(ps[5].kv_events_port, 5205);
        assert_eq!(ps[1].node_rank, 1);
    }

    #[test]
    fn tp4_prefill_and_decode_share_one_node_or_not() {
        // P TP4 + D TP4 and a single 8-GPU node: decode takes the other half.
        let eps = allocate(&t(8, (1, 4), (1, 4), (0, 8)), 1).unwrap();
        assert_eq!(
            (eps[0].nodes.clone(), eps[0].gpus.clone()),
            (vec![0], vec![0, 1, 2, 3])
        );
        assert_eq!(
            (eps[1].nodes.clone(), eps[1].gpus.clone()),
            (vec![0], vec![4, 5, 6, 7])
        );
        // With a second node, decode moves there.
        let eps = allocate(&t(8, (1, 4), (1, 4), (0, 8)), 2).unwrap();
        assert_eq!(
            (eps[1].nodes.clone(), eps[1].gpus.clone()),
            (vec![1], vec![0, 1, 2, 3])
        );
        // Two TP4 decodes after a TP4 prefill on two nodes: both on node 1.
        let eps = allocate(&t(8, (1, 4), (2, 4), (0, 8)), 2).unwrap();
        assert_eq!(eps[2].gpus, vec![4, 5, 6, 7]);
        assert_eq!(eps[2].nodes, vec![1]);
    }

    #[test]
    fn vllm_per_gpu_and_per_node_data_parallel_layouts() {
        // One DP8 prefill worker over one 8-GPU node.
        let eps = allocate(&t(8, (1, 8), (0, 8), (0, 8)), 1).unwrap();
        let dp = |_: Role| VllmDp {
            dp_size: Some(8),
            replica: 1,
        };
        let per_gpu = vllm_processes(&eps, &dp, false, false).unwrap();
        assert_eq!(per_gpu.len(), 8);
        assert_eq!(per_gpu[3].gpus, vec![3]);
        assert_eq!(per_gpu[3].node_rank, 3);
        assert_eq!((per_gpu[0].http_port, per_gpu[1].http_port), (6100, 0));
        assert_eq!(
            (per_gpu[0].bootstrap_port, per_gpu[1].bootstrap_port),
            (Some(7200), None)
        );
        assert!(per_gpu
            .iter()
            .all(|p| p.nixl_port == 5400 && p.dp_rpc_port == Some(8400)));
        assert_eq!(per_gpu[7].sys_port, 7507);
        // per_node: one process owning the 8 local ranks; kv-events ports reserved as a block.
        let per_node = vllm_processes(&eps, &dp, true, false).unwrap();
        assert_eq!(per_node.len(), 1);
        assert_eq!(per_node[0].node_rank, 0);
        // A direct `vllm serve` frontend keeps srtctl's generic layout.
        let direct = vllm_processes(&eps, &dp, true, true).unwrap();
        assert_eq!(direct.len(), 1);
        assert_eq!(direct[0].dp_rpc_port, None);
        // dp x replica must equal the worker's GPUs.
        let bad = |_: Role| VllmDp {
            dp_size: Some(4),
            replica: 1,
        };
        let e = vllm_processes(&eps, &bad, true, false).unwrap_err();
        assert!(e.message.contains("need 4 GPUs"), "{e}");
    }

    #[test]
    fn not_enough_nodes_is_an_error_not_a_panic() {
        let e = allocate(&t(8, (1, 8), (3, 8), (0, 8)), 2).unwrap_err();
        assert!(e.message.contains("at least 3 worker nodes"), "{e}");
        let e = allocate(&t(4, (0, 4), (0, 4), (9, 1)), 2).unwrap_err();
        assert!(e.message.contains("worker nodes"), "{e}");
    }
}
