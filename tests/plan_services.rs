//! The 2.0 service model, rule by rule, on small inline recipes: external endpoints, `per:
//! worker` instances, the discovery variables, per-service supervision, srtctl's placement
//! defaults, phases and teardown tiers. Pure: plans only, nothing runs.

use crate::node_plan;

use mcsup::plan::{self, Phase, ProcessKind, Role, ServiceHere, SignalName};
use node_plan::plan_on;

const HEAD: &str = "schema: 2\nengine: sglang\nroles:\n  prefill: {env: {MOONCAKE_GLOBAL_SEGMENT_SIZE: \"0\"}, args: {disaggregation-transfer-backend: mooncake}}\n  decode: {env: {MOONCAKE_GLOBAL_SEGMENT_SIZE: \"0\"}, args: {disaggregation-transfer-backend: mooncake}}\nfrontend: {type: sglang-router}\n";

fn with(services: &str) -> String {
    format!("{HEAD}services:\n{services}")
}

#[test]
fn an_external_master_is_not_launched_and_clients_get_its_address() {
    let y = with("  - {name: mm, type: mooncake-master, external: \"10.9.9.9:9700\"}\n  - {name: st, type: mooncake-store, placement: {node: decode}, args: [--port, \"8800\"], readiness: {port: 8800}, env: {MOONCAKE_GLOBAL_SEGMENT_SIZE: 1gb}}\n");
    // Not even on the infra node.
    let head = plan_on(&y, "n1", &[Role::Decode]).unwrap();
    assert!(head.processes.iter().all(|p| p.kind != ProcessKind::Master));
    let row = head.services.iter().find(|s| s.name == "mm").unwrap();
    assert_eq!(
        row.here,
        ServiceHere::External {
            endpoint: "10.9.9.9:9700".into()
        }
    );
    let store = head
        .processes
        .iter()
        .find(|p| p.kind == ProcessKind::Store)
        .unwrap();
    assert_eq!(store.env_value("MOONCAKE_MASTER"), Some("10.9.9.9:9700"));
    assert_eq!(
        store.env_value("MOONCAKE_TE_META_DATA_SERVER"),
        Some("http://10.9.9.9:8701/metadata")
    );
    // Everything waits on the external master's RPC port.
    let gate = head.gates.iter().find(|g| g.name == "mm@external").unwrap();
    assert_eq!(gate.readiness.probes.len(), 1);
    assert_eq!(gate.readiness.probes[0].to_string(), "tcp 10.9.9.9:9700");
    assert!(store.depends_on.iter().any(|d| d.target == "mm@external"));
}

#[test]
fn per_worker_services_get_one_instance_per_worker_with_worker_placeholders() {
    let y = format!(
        "{}mcsup:\n  workers:\n    decode:\n      - {{name: w, command: [sleep, \"9\"], count: 3}}\n",
        with("  - {name: gpu-watch, command: [watch, \"{worker_role}-{worker_index}\"], placement: {node: decode, per: worker}, readiness: {log: {pattern: up}}}\n")
    );
    let p = plan_on(&y, "n2", &[Role::Decode]).unwrap();
    let inst: Vec<_> = p
        .processes
        .iter()
        .filter(|x| x.service.as_ref().is_some_and(|o| o.service == "gpu-watch"))
        .collect();
    assert_eq!(inst.len(), 3);
    assert_eq!(inst[2].name, "gpu-watch-decode-2");
    assert_eq!(inst[2].argv, vec!["watch", "decode-2"]);
    assert_eq!(inst[2].roles, vec![Role::Decode]);
    // A per-worker service on a prefill placement has no instance on a decode node.
    let y2 = format!(
        "{}mcsup:\n  workers:\n    decode:\n      - {{name: w, command: [sleep, \"9\"]}}\n",
        with("  - {name: gw, command: [watch], placement: {node: prefill, per: worker}}\n")
    );
    let p2 = plan_on(&y2, "n2", &[Role::Decode]).unwrap();
    assert_eq!(p2.services[0].here, ServiceHere::Elsewhere);
}

#[test]
fn discovery_variables_only_for_effective_services_and_not_on_etcd_itself() {
    // No dynamo frontend, no etcd/nats declared: no discovery variables at all.
    let none = plan_on(
        &with("  - {name: g, command: [sleep, \"1\"], placement: {node: decode}}\n"),
        "n2",
        &[Role::Decode],
    )
    .unwrap();
    assert!(none
        .processes
        .iter()
        .all(|p| p.env_value("ETCD_ENDPOINTS").is_none() && p.env_value("NATS_SERVER").is_none()));

    // The default dynamo frontend implies etcd; NATS only with a NATS plane.
    let dynamo = HEAD.replace("frontend: {type: sglang-router}\n", "");
    let etcd_only = plan_on(&dynamo, "n2", &[Role::Decode]).unwrap();
    let w = etcd_only
        .processes
        .iter()
        .find(|p| p.kind == ProcessKind::Worker)
        .unwrap();
    assert_eq!(w.env_value("ETCD_ENDPOINTS"), Some("http://10.0.0.1:2379"));
    assert_eq!(w.env_value("NATS_SERVER"), None);
    let row = etcd_only
        .services
        .iter()
        .find(|s| s.r#type == "etcd")
        .unwrap();
    assert_eq!(row.implied_by.as_deref(), Some("frontend.type dynamo"));

    let with_nats = format!("{dynamo}dynamo: {{request_plane: nats}}\n");
    let head = plan_on(&with_nats, "n1", &[Role::Prefill]).unwrap();
    let etcd = head.processes.iter().find(|p| p.name == "etcd").unwrap();
    assert_eq!(etcd.phase, Phase::Infra);
    assert_eq!(
        etcd.env_value("ETCD_ENDPOINTS"),
        None,
        "etcd gets no discovery env"
    );
    assert!(etcd.argv[0].ends_with("/configs/etcd"), "{:?}", etcd.argv);
    assert!(
        etcd.argv.contains(&"/scratch/mcsup-5-n1/etcd".to_string()),
        "{:?}",
        etcd.argv
    );
    let nats = head.processes.iter().find(|p| p.name == "nats").unwrap();
    assert_eq!(nats.stop.signal, SignalName::SIGINT);
    let w = head
        .processes
        .iter()
        .find(|p| p.kind == ProcessKind::Worker)
        .unwrap();
    assert_eq!(w.env_value("NATS_SERVER"), Some("nats://10.0.0.1:4222"));

    // inherit_discovery_env: false drops them from that service.
    let y = format!("{dynamo}services:\n  - {{name: g, command: [sleep, \"1\"], placement: {{node: decode}}, inherit_discovery_env: false}}\n");
    let p = plan_on(&y, "n2", &[Role::Decode]).unwrap();
    let g = p.processes.iter().find(|x| x.name == "g").unwrap();
    assert_eq!(g.env_value("ETCD_ENDPOINTS"), None);
}

#[test]
fn per_service_supervision_and_unknown_names() {
    let y = format!(
        "{}mcsup:\n  services:\n    g: {{stop: {{signal: SIGINT, grace_seconds: 3}}, restart: {{policy: on-failure}}}}\n",
        with("  - {name: g, command: [sleep, \"1\"], placement: {node: decode}}\n")
    );
    let p = plan_on(&y, "n2", &[Role::Decode]).unwrap();
    let g = p.processes.iter().find(|x| x.name == "g").unwrap();
    assert_eq!(g.stop.signal, SignalName::SIGINT);
    assert_eq!(g.stop.grace.as_secs(), 3);
    assert_eq!(g.restart.policy, plan::RestartPolicy::OnFailure);

    let bad = y.replace("    g: {stop", "    gg: {stop");
    let e = plan_on(&bad, "n2", &[Role::Decode]).unwrap_err();
    assert_eq!(e.key_path, "mcsup.services.gg");
    assert!(e.fix.contains("g"), "{e}");
}

#[test]
fn a_placement_block_without_node_means_head_not_the_kinds_default() {
    // srtctl's dataclass default: `placement: {per: node}` is `head`, although a generic
    // service's kind default is head too; use lmcache-server, whose kind default is workers.
    let y = with("  - {name: lm, type: lmcache-server, placement: {per: node}}\n");
    let worker_node = plan_on(&y, "n2", &[Role::Decode]).unwrap();
    assert_eq!(worker_node.services[0].placement, "head");
    assert_eq!(worker_node.services[0].here, ServiceHere::Elsewhere);
    // Without the block, the kind's default (workers) applies.
    let y = with("  - {name: lm, type: lmcache-server}\n");
    let p = plan_on(&y, "n2", &[Role::Decode]).unwrap();
    assert!(matches!(p.services[0].here, ServiceHere::Runs { .. }));
}

#[test]
fn phases_order_the_start_and_tiers_the_teardown() {
    let y = format!(
        "{}dynamo: {{request_plane: nats}}\nservices:\n  - {{name: mooncake-master, type: mooncake-master}}\n  - {{name: st, type: mooncake-store, placement: {{node: workers}}, args: [--port, \"8800\"], readiness: {{port: 8800}}, env: {{MOONCAKE_GLOBAL_SEGMENT_SIZE: 1gb}}}}\n  - {{name: ww, command: [sleep, \"1\"], placement: {{node: workers}}, start: with_workers}}\n  - {{name: af, command: [sleep, \"1\"], placement: {{node: workers}}}}\n",
        HEAD.replace("frontend: {type: sglang-router}\n", "")
    );
    let p = plan_on(&y, "n1", &[Role::Prefill]).unwrap();
    let names: Vec<&str> = p.processes.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "etcd",
            "nats",
            "mooncake-master",
            "st",
            "ww",
            "sglang-prefill",
            "af"
        ]
    );
    let tier = |n: &str| {
        p.processes
            .iter()
            .find(|x| x.name == n)
            .unwrap()
            .teardown_tier()
    };
    assert!(tier("af") < tier("sglang-prefill"));
    assert_eq!(tier("ww"), tier("sglang-prefill"));
    assert!(tier("sglang-prefill") < tier("st"));
    assert!(tier("st") < tier("mooncake-master"));
    assert!(tier("mooncake-master") < tier("etcd"));
    let deps = |n: &str| -> Vec<String> {
        p.processes
            .iter()
            .find(|x| x.name == n)
            .unwrap()
            .depends_on
            .iter()
            .map(|d| d.target.clone())
            .collect()
    };
    assert_eq!(deps("mooncake-master"), ["etcd", "nats"]);
    assert_eq!(deps("st"), ["etcd", "nats", "mooncake-master"]);
    assert!(deps("sglang-prefill").contains(&"st".to_string()));
    assert!(
        !deps("sglang-prefill").contains(&"ww".to_string()),
        "with_workers does not gate workers"
    );
    assert_eq!(deps("af"), ["etcd", "nats", "sglang-prefill"]);
}

#[test]
fn a_teardown_deadline_past_slurms_default_kill_wait_is_warned() {
    let yaml = |deadline: u32| {
        format!(
            "{}mcsup:\n  shutdown:\n    deadline_seconds: {deadline}\n",
            with("  - {name: m, type: mooncake-master}\n")
        )
    };
    let warned = |deadline| {
        plan_on(&yaml(deadline), "n1", &[Role::Prefill])
            .unwrap()
            .warnings
            .iter()
            .any(|w| {
                w.contains("past Slurm's default KillWait of 30 s") && w.contains("28 s or less")
            })
    };
    assert!(!warned(28));
    assert!(warned(29));
    // The tiers the worst case is summed over: workers, then the master.
    let p = plan_on(&yaml(25), "n1", &[Role::Prefill]).unwrap();
    let tiers = plan::teardown_tiers(&p.processes);
    let names: Vec<Vec<String>> = tiers.iter().map(|t| t.names.clone()).collect();
    assert_eq!(names.last().unwrap(), &vec!["m".to_string()], "{names:?}");
    assert!(tiers.windows(2).all(|w| w[0].tier < w[1].tier));
}

/// srt-slurm 2.0's `terminal: true`: the service's instances are terminal processes (the job
/// ends once every one has exited, with the worst status; no result gate), and srtctl's rule
/// holds: not beside a benchmark other than `manual`.
#[test]
fn a_terminal_service_ends_the_job_and_is_refused_beside_a_benchmark() {
    let svc = "  - {name: load, type: generic, command: [/bin/true], placement: {node: head}, terminal: true}\n";
    let p = plan_on(&with(svc), "n1", &[Role::Decode]).unwrap();
    let load = p
        .processes
        .iter()
        .find(|x| x.name.starts_with("load"))
        .unwrap();
    let t = load.terminal.as_ref().expect("terminal");
    assert_eq!(t.benchmark, None);
    assert!(
        !p.ignored_sections.iter().any(|s| s.contains("terminal")),
        "{:?}",
        p.ignored_sections
    );
    // The default benchmark is manual: allowed; so is an explicit one.
    let manual = format!("{}benchmark: {{type: manual}}\n", with(svc));
    assert!(plan_on(&manual, "n1", &[Role::Decode]).is_ok());
    let sa = format!(
        "{}benchmark: {{type: sa-bench, isl: 8, osl: 8, concurrencies: \"2\"}}\n",
        with(svc)
    );
    let e = plan_on(&sa, "n1", &[Role::Decode]).unwrap_err();
    assert_eq!(e.key_path, "services[0].terminal", "{e}");
    assert!(e.message.contains("benchmark.type is `sa-bench`"), "{e}");
    assert!(e.fix.contains("benchmark.type: manual"), "{e}");
}

/// Round 4's N30: a service planned on a port another process of the node already uses (here
/// the prefill worker's 30000) is warned, naming both; on a free port, nothing is said. (Two
/// services on one port are an error already.)
#[test]
fn a_service_on_a_port_a_worker_of_the_node_uses_is_warned() {
    let svc = |port: u16| {
        with(&format!(
            "  - {{name: m, type: mooncake-master}}\n  - {{name: side, command: [sleep, \"1\"], placement: {{node: prefill}}, readiness: {{port: {port}}}}}\n"
        ))
    };
    let warned = |port| {
        plan_on(&svc(port), "n1", &[Role::Prefill])
            .unwrap()
            .warnings
            .into_iter()
            .filter(|w| w.contains("both use port"))
            .collect::<Vec<_>>()
    };
    let w = warned(30000);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("both use port 30000 on this node") && w[0].contains("side"),
        "{w:?}"
    );
    assert!(warned(29101).is_empty());
}

/// Round 4's N30, the exporters: a node-exporter's `options.port` (or its default 9101) is a
/// port it listens on though no probe names it. Against a worker's port it is warned; against
/// another service's it is the error two services on one port are; the preflight checks it free.
#[test]
fn an_exporters_listen_port_counts_like_any_other() {
    let exporter = |port: &str, other: &str| {
        with(&format!(
            "  - {{name: m, type: mooncake-master}}\n  - {{name: nx, type: node-exporter{port}}}\n{other}"
        ))
    };
    let p = plan_on(
        &exporter(", options: {port: 30000}", ""),
        "n1",
        &[Role::Prefill],
    )
    .unwrap();
    let w: Vec<_> = p
        .warnings
        .iter()
        .filter(|w| w.contains("both use port"))
        .collect();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("both use port 30000") && w[0].contains("nx"),
        "{w:?}"
    );
    let nx = p
        .processes
        .iter()
        .find(|p| p.name.starts_with("nx"))
        .unwrap();
    assert_eq!(nx.listens, [30000]);
    assert!(
        nx.argv.contains(&"--web.listen-address=:30000".to_string()),
        "{:?}",
        nx.argv
    );
    // The kind's default port, when options say none.
    let p = plan_on(&exporter("", ""), "n1", &[Role::Prefill]).unwrap();
    let nx = p
        .processes
        .iter()
        .find(|p| p.name.starts_with("nx"))
        .unwrap();
    assert_eq!(nx.ports_here(&|_| true), [9101]);
    // Against another service's readiness port: refused, as two services on one port are.
    let side = "  - {name: side, command: [sleep, \"1\"], placement: {node: prefill}, readiness: {port: 29100}}\n";
    let e = plan_on(
        &exporter(", options: {port: 29100}", side),
        "n1",
        &[Role::Prefill],
    )
    .unwrap_err();
    assert!(e.message.contains("both listen on port 29100"), "{e}");
    // A command of the recipe's own: mcsup does not guess its port.
    let own = with("  - {name: m, type: mooncake-master}\n  - {name: nx, type: node-exporter, command: [my-exporter], options: {port: 30000}}\n");
    let p = plan_on(&own, "n1", &[Role::Prefill]).unwrap();
    assert!(
        !p.warnings.iter().any(|w| w.contains("both use port")),
        "{:?}",
        p.warnings
    );
}

/// The adversarial re-run's D18: `mcsup.log_dir` empty, or with a `{name}` left after its
/// placeholders (`{role}`, a typo, the `{{node}}` that became `{vm}`), is refused naming the key;
/// `{job_id}` and `{node}` are filled.
#[test]
fn a_log_dir_with_a_placeholder_it_does_not_fill_is_refused() {
    let recipe = |dir: &str| {
        format!(
            "{}mcsup: {{log_dir: {dir:?}}}\n",
            with("  - {name: m, type: mooncake-master}\n")
        )
    };
    for bad in ["", "  ", "/logs/{role}", "/logs/{foo}", "/logs/{{node}}"] {
        let e = plan_on(&recipe(bad), "n1", &[Role::Prefill]).unwrap_err();
        assert!(e.key_path.contains("mcsup.log_dir"), "{bad:?}: {e}");
        assert!(e.fix.contains("{job_id}"), "{bad:?}: {e}");
    }
    let e = plan_on(&recipe("/logs/{{node}}"), "n1", &[Role::Prefill]).unwrap_err();
    assert!(e.message.contains("keeps `{n1}`"), "{e}");
    let p = plan_on(&recipe("/logs/{job_id}/{node}"), "n1", &[Role::Prefill]).unwrap();
    assert!(p.log_dir.ends_with("n1"), "{}", p.log_dir.display());
}
