//! What the plan takes from Mooncake itself, on small inline recipes: a store's registration
//! readiness and `/health` liveness, the master's cleanup flags and their note, and the lints on
//! Mooncake clients (each with its source). Pure: plans only, nothing runs.

use crate::node_plan;

use mcsup::plan::{Plan, ProbeSpec, ProcessKind, ProcessSpec, Role};

fn plan_on(yaml: &str, node: &str, roles: &[Role]) -> Plan {
    node_plan::plan_on(yaml, node, roles).unwrap_or_else(|e| panic!("{e}"))
}

/// The seed's shape: a standalone store per role, a synthetic worker; `extra` goes under
/// `backend.mooncake_kv_store.standalone.env`, `mc` under `mcsup:`.
fn v1(store_env: &str, master_extra: &str, mc: &str) -> String {
    format!(
        r#"name: t
backend:
  type: sglang
  prefill_environment: {{MOONCAKE_GLOBAL_SEGMENT_SIZE: "0"}}
  decode_environment: {{MOONCAKE_GLOBAL_SEGMENT_SIZE: "0"}}
  mooncake_kv_store:
    master_extra_args: [{master_extra}]
    standalone:
      args: [--port, "8800"]
      env: {{MOONCAKE_PROTOCOL: tcp{store_env}}}
      placements:
        prefill: {{env: {{MOONCAKE_GLOBAL_SEGMENT_SIZE: "256mb"}}}}
        decode: {{env: {{MOONCAKE_GLOBAL_SEGMENT_SIZE: "512mb"}}}}
      health_check: {{port: 8800, timeout_seconds: 60}}
mcsup:
  workers:
    prefill: [{{name: w, command: [sleep, "9"]}}]
    decode: [{{name: w, command: [sleep, "9"]}}]
{mc}"#
    )
}

fn store(p: &Plan) -> &ProcessSpec {
    p.processes
        .iter()
        .find(|p| p.kind == ProcessKind::Store)
        .expect("a store")
}

#[test]
fn a_store_is_ready_when_the_master_lists_its_segment_and_alive_while_its_health_answers() {
    let p = plan_on(&v1("", "", ""), "n2", &[Role::Decode]);
    let s = store(&p);
    let seg = s.segment_probe().expect("a registration probe");
    // The master runs on the infra node n1 (10.0.0.1); its admin server is the metrics port.
    assert_eq!(
        (seg.master_host.as_str(), seg.admin_port),
        ("10.0.0.1", 8702)
    );
    assert_eq!(seg.hostname, "10.0.0.2");
    assert_eq!(seg.size_bytes, Some(512 << 20));
    assert_eq!(seg.protocol, "tcp");
    // After the REST port, as before.
    assert_eq!(
        s.readiness.as_ref().unwrap().probes[0].to_string(),
        "tcp 127.0.0.1:8800"
    );
    assert_eq!(
        s.liveness.as_ref().map(|l| l.probe.clone()),
        Some(ProbeSpec::MooncakeHealth {
            host: "127.0.0.1".into(),
            port: 9300
        })
    );
    assert_eq!(
        s.env_value("MOONCAKE_ENABLE_CLIENT_HTTP_SERVER"),
        Some("true")
    );
    assert_eq!(s.env_value("MOONCAKE_CLIENT_HTTP_PORT"), Some("9300"));
    assert!(
        p.notes.iter().any(|n| n
            .starts_with("store: liveness is the store's own /health on port 9300")
            && n.ends_with("at 512 MiB over tcp")),
        "{:?}",
        p.notes
    );
}

#[test]
fn the_recipe_moves_or_turns_off_the_stores_client_http_server() {
    let moved = plan_on(
        &v1("", "", "  store: {client_http_port: 19300}\n"),
        "n2",
        &[Role::Decode],
    );
    assert_eq!(
        store(&moved).env_value("MOONCAKE_CLIENT_HTTP_PORT"),
        Some("19300")
    );
    let own = plan_on(
        &v1(", MOONCAKE_CLIENT_HTTP_PORT: \"9444\"", "", ""),
        "n2",
        &[Role::Decode],
    );
    assert!(matches!(
        store(&own).liveness.as_ref().map(|l| &l.probe),
        Some(ProbeSpec::MooncakeHealth { port: 9444, .. })
    ));
    let off = plan_on(
        &v1(", MOONCAKE_ENABLE_CLIENT_HTTP_SERVER: \"false\"", "", ""),
        "n2",
        &[Role::Decode],
    );
    assert!(store(&off).liveness.is_none());
    assert_eq!(store(&off).env_value("MOONCAKE_CLIENT_HTTP_PORT"), None);
    // The recipe's own liveness wins.
    let mine = plan_on(
        &v1("", "", "  store: {liveness: {tcp: {port: 8800}}}\n"),
        "n2",
        &[Role::Decode],
    );
    assert!(matches!(
        store(&mine).liveness.as_ref().map(|l| &l.probe),
        Some(ProbeSpec::Tcp { port: 8800, .. })
    ));
    // A config file sets the size: only the registration is checked.
    let file = plan_on(
        &v1(", MOONCAKE_CONFIG_PATH: /etc/mc.json", "", ""),
        "n2",
        &[Role::Decode],
    );
    assert_eq!(store(&file).segment_probe().unwrap().size_bytes, None);
}

#[test]
fn the_master_gets_the_cleanup_flags_with_a_note_unless_the_recipe_says_otherwise() {
    let argv = |p: &Plan| {
        p.processes
            .iter()
            .find(|x| x.kind == ProcessKind::Master)
            .unwrap()
            .argv
            .clone()
    };
    let p = plan_on(&v1("", "", ""), "n1", &[Role::Prefill]);
    let a = argv(&p);
    assert_eq!(
        &a[a.len() - 2..],
        [
            "--enable_metadata_cleanup_on_timeout=true",
            "--client_ttl=10"
        ]
    );
    assert!(p.notes[0].starts_with("the master gets --enable_metadata_cleanup_on_timeout=true --client_ttl=10: mcsup restarts a store"), "{:?}", p.notes);
    // Its own TTL is kept, and the note names only what mcsup added.
    let p = plan_on(&v1("", "--client_ttl=30", ""), "n1", &[Role::Prefill]);
    let a = argv(&p);
    assert_eq!(
        &a[a.len() - 2..],
        [
            "--client_ttl=30",
            "--enable_metadata_cleanup_on_timeout=true"
        ]
    );
    assert!(p.notes[0].starts_with("the master gets --enable_metadata_cleanup_on_timeout=true: "));
    // Turned off.
    let p = plan_on(
        &v1("", "", "  master: {metadata_cleanup: false}\n"),
        "n1",
        &[Role::Prefill],
    );
    assert!(!argv(&p)
        .iter()
        .any(|a| a.contains("cleanup") || a.contains("client_ttl")));
    assert!(!p.notes.iter().any(|n| n.contains("cleanup")));
}

#[test]
fn an_ha_master_address_passes_through_with_a_warning() {
    let ha = "etcd://10.0.0.9:2379;10.0.0.8:2379";
    let p = plan_on(
        &v1(&format!(", MOONCAKE_MASTER: \"{ha}\""), "", ""),
        "n2",
        &[Role::Decode],
    );
    assert_eq!(store(&p).env_value("MOONCAKE_MASTER"), Some(ha));
    assert!(
        p.warnings.iter().any(|w| w.starts_with(&format!(
            "store: MOONCAKE_MASTER={ha} (standalone.env) is a Mooncake HA address: passed through"
        ))),
        "{:?}",
        p.warnings
    );
    // A plain address in the recipe is still mcsup's to set.
    let p = plan_on(
        &v1(", MOONCAKE_MASTER: \"10.9.9.9:1\"", "", ""),
        "n2",
        &[Role::Decode],
    );
    assert_eq!(
        store(&p).env_value("MOONCAKE_MASTER"),
        Some("10.0.0.1:8700")
    );
    assert!(!p.warnings.iter().any(|w| w.contains("HA address")));
}

#[test]
fn a_local_first_master_with_clients_named_apart_from_the_store_is_warned() {
    let y = v1("", "--allocation_strategy=local_first", "").replace(
        "decode: [{name: w, command: [sleep, \"9\"]}]",
        "decode: [{name: w, command: [sleep, \"9\"], env: {MOONCAKE_LOCAL_HOSTNAME: \"192.168.1.2\"}}]",
    );
    let p = plan_on(&y, "n2", &[Role::Decode]);
    assert!(
        p.warnings.iter().any(|w| w.starts_with("w: the master allocates local_first, but this worker registers as 192.168.1.2 while this node's store registers as 10.0.0.2")),
        "{:?}",
        p.warnings
    );
    // The same host: no warning; and none without local_first.
    let same = v1("", "--allocation_strategy=local_first", "").replace(
        "decode: [{name: w, command: [sleep, \"9\"]}]",
        "decode: [{name: w, command: [sleep, \"9\"], env: {MOONCAKE_LOCAL_HOSTNAME: \"10.0.0.2:17000\"}}]",
    );
    assert!(!plan_on(&same, "n2", &[Role::Decode])
        .warnings
        .iter()
        .any(|w| w.contains("local_first")));
    let random = y.replace(
        "--allocation_strategy=local_first",
        "--allocation_strategy=random",
    );
    assert!(!plan_on(&random, "n2", &[Role::Decode])
        .warnings
        .iter()
        .any(|w| w.contains("local_first")));
}

#[test]
fn vllm_store_connector_workers_without_one_hash_seed_are_warned() {
    let recipe = |env: &str, extra: &str| {
        format!(
            r#"name: t
backend:
  type: vllm
  decode_environment: {{{env}}}
  vllm_config:
    decode:
      model: /m
      kv-transfer-config: '{{"kv_connector":"MooncakeStoreConnector","kv_role":"kv_both"}}'
{extra}  mooncake_kv_store:
    store_config: {{protocol: tcp, global_segment_size: 0}}
resources: {{gpus_per_node: 8, decode_nodes: 1, prefill_nodes: 1}}
"#
        )
    };
    let warned = |p: &Plan| {
        p.warnings
            .iter()
            .any(|w| w.contains("MooncakeStoreConnector keys blocks with Python's built-in hash"))
    };
    let p = plan_on(&recipe("", ""), "n2", &[Role::Decode]);
    assert!(warned(&p), "{:?}", p.warnings);
    assert!(p.warnings.iter().any(|w| w.contains("vllm-ascend")));
    assert!(!warned(&plan_on(
        &recipe("PYTHONHASHSEED: \"0\"", ""),
        "n2",
        &[Role::Decode]
    )));
    let sha = recipe("", "      prefix-caching-hash-algo: sha256\n");
    assert!(!warned(&plan_on(&sha, "n2", &[Role::Decode])));
}

/// A job of more nodes than `mcsup.store.register_at_once` (default 8): each node's stores wait
/// for their place from the coordinator (a gate answered by the control connection), the plan
/// says so with the numbers, and the master's `--client_ttl` outlasts the joins that may come at
/// once (2 s each above Mooncake's 10 s). Below the limit nothing waits and the TTL stays 10 s.
#[test]
fn stores_beyond_the_limit_wait_for_their_place_and_the_master_outlasts_their_joins() {
    let plan = |mc: &str, node: &str, nodes: &str| {
        crate::node_plan::plan_in(&v1("", "", mc), node, nodes, &[Role::Prefill])
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let ttl = |p: &Plan| {
        p.processes
            .iter()
            .find(|x| x.kind == ProcessKind::Master)
            .unwrap()
            .argv
            .iter()
            .find(|a| a.starts_with("--client_ttl"))
            .cloned()
            .unwrap()
    };
    let gate = |p: &Plan| {
        p.gates
            .iter()
            .find(|g| g.name == "store-places@n1")
            .map(|g| (g.readiness.probes.clone(), g.readiness.timeout))
    };

    // 9 nodes, the default limit: n5's store waits for its place.
    let p = plan("", "n5", "n[1-9]");
    let (probes, timeout) = gate(&p).expect("the place gate");
    assert_eq!(
        probes,
        [ProbeSpec::StorePlace {
            coordinator: "n1".into(),
            at_once: 8
        }]
    );
    // Two rounds of places, each as long as the store's own readiness (60 s).
    assert_eq!(timeout.as_secs(), 120);
    assert!(store(&p)
        .depends_on
        .iter()
        .any(|d| d.target == "store-places@n1"));
    assert_eq!(p.control.as_ref().unwrap().stores_at_once, 8);
    assert!(
        p.notes.iter().any(|n| n.starts_with("stores: at most 8 of the job's stores register with the Mooncake master at a time (mcsup.store.register_at_once; 9 nodes): this node's 1 wait")),
        "{:#?}",
        p.notes
    );
    // The master's node: 8 stores may join at once.
    let p = plan("", "n1", "n[1-9]");
    assert_eq!(ttl(&p), "--client_ttl=16");
    assert!(
        p.notes[0]
            .contains("--client_ttl (16 s: 2 s for each of the 8 stores that may register at once"),
        "{}",
        p.notes[0]
    );
    // No limit: all 9 may join at once, nothing waits.
    let p = plan("  store: {register_at_once: 0}\n", "n1", "n[1-9]");
    assert_eq!(ttl(&p), "--client_ttl=18");
    assert!(gate(&p).is_none());
    assert_eq!(p.control.as_ref().unwrap().stores_at_once, 0);
    // Three nodes: below the default limit, as before.
    let p = plan("", "n1", "n[1-3]");
    assert_eq!(ttl(&p), "--client_ttl=10");
    assert!(gate(&p).is_none());
    // A limit of 2 over three nodes: the stores wait, and 2 joins fit in Mooncake's 10 s.
    let p = plan("  store: {register_at_once: 2}\n", "n1", "n[1-3]");
    assert_eq!(ttl(&p), "--client_ttl=10");
    assert!(gate(&p).is_some());
}
