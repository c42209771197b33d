//! The host names this node's processes will use to reach the job's other parts (etcd, NATS, the
//! Mooncake master, the frontend, the other nodes' gates) must resolve here. srtctl writes node
//! names into `ETCD_ENDPOINTS`/`NATS_SERVER` (`http://<infra node>:2379`); on a cluster whose
//! nodes do not resolve each other's Slurm names, Dynamo's processes spend their whole start-up
//! retrying an address that never answers, and nothing says why. The names are resolved once, all
//! at once, within the preflight's bound on outside tools (a hung resolver cannot hold the start).

use std::collections::BTreeMap;
use std::time::Duration;

use super::report::{Check, Report};
use crate::node::Answer;
use crate::plan::{Plan, ProbeSpec};

/// Variables whose values name other hosts (`scheme://host:port`, `host:port`, or a host).
const HOST_VARIABLES: &[&str] = &[
    "ETCD_ENDPOINTS",
    "NATS_SERVER",
    "MOONCAKE_MASTER",
    "MC_MS_ADDR",
    "HEAD_NODE_IP",
    "MOONCAKE_METADATA_SERVER",
];

/// Who uses a host name first, in words, and the variables that carry it.
type User = (String, Vec<String>);

/// Each host name the plan uses with the first user that uses it (`frontend_0's NATS_SERVER`).
pub fn hosts(plan: &Plan) -> BTreeMap<String, User> {
    let mut out = BTreeMap::new();
    let mut add = |host: &str, by: User| {
        let host = host.trim_matches(|c| c == '[' || c == ']');
        if !host.is_empty() && host.parse::<std::net::IpAddr>().is_err() && host != "localhost" {
            let e: &mut User = out.entry(host.to_string()).or_insert((by.0, Vec::new()));
            for v in by.1 {
                if !e.1.contains(&v) {
                    e.1.push(v);
                }
            }
        }
    };
    for p in &plan.processes {
        for e in p
            .env
            .iter()
            .filter(|e| HOST_VARIABLES.contains(&e.name.as_str()))
        {
            for part in e.value.split(',') {
                if let Some(h) = host_of(part) {
                    add(
                        &h,
                        (format!("{}'s {}", p.name, e.name), vec![e.name.clone()]),
                    );
                }
            }
        }
    }
    for g in &plan.gates {
        for probe in &g.readiness.probes {
            let host = match probe {
                ProbeSpec::Tcp { host, .. } | ProbeSpec::Http { host, .. } => host,
                ProbeSpec::Servable(s) => &s.host,
                _ => continue,
            };
            add(host, (format!("the wait for {}", g.name), Vec::new()));
        }
    }
    out
}

/// The host of `scheme://host:port/path`, `host:port` or `host`.
fn host_of(value: &str) -> Option<String> {
    let v = value.trim();
    let v = v.split_once("://").map_or(v, |(_, rest)| rest);
    let v = v.split(['/', '?']).next()?;
    let v = v.rsplit_once('@').map_or(v, |(_, h)| h);
    let host = if let Some(rest) = v.strip_prefix('[') {
        rest.split(']').next()?
    } else {
        match v.rsplit_once(':') {
            Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
            _ => v,
        }
    };
    (!host.is_empty()).then(|| host.to_string())
}

/// Resolve `host` within `wait`: its addresses, or why not.
#[cfg(test)]
fn resolve(host: &str, wait: Duration) -> Result<Vec<std::net::IpAddr>, String> {
    let answer = crate::node::lookup_all(&[host.to_string()], wait, &|| false);
    answer_of(answer.into_iter().next(), wait)
}

fn answer_of(a: Option<Answer>, wait: Duration) -> Result<Vec<std::net::IpAddr>, String> {
    match a {
        Some(Answer::Found(a)) => Ok(a),
        Some(Answer::Failed(e)) => Err(e),
        _ => Err(format!(
            "no answer from the resolver within {} s",
            wait.as_secs_f64()
        )),
    }
}

/// Every name of [`hosts`] resolves here.
pub fn check(plan: &Plan, wait: Duration, report: &mut Report) {
    let hosts = hosts(plan);
    let names: Vec<String> = hosts.keys().cloned().collect();
    // All at once within `wait`; a stop request (held during `run`'s preflight) ends the wait.
    let answers =
        crate::node::lookup_all(&names, wait, &|| crate::domain::stop_pending().is_some());
    for ((host, (by, vars)), answer) in hosts.into_iter().zip(answers) {
        let label = format!("{host} resolves");
        match answer_of(Some(answer), wait) {
            Ok(a) if !a.is_empty() => report.push(Check::ok(
                "network",
                &label,
                format!(
                    "{host} ({by}) is {}",
                    a.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
            other => {
                let why = match other {
                    Err(e) => format!(" ({e})"),
                    _ => " (no address)".to_string(),
                };
                report.push(Check::fail(
                    "network",
                    &label,
                    format!(
                        "{host} ({by}) does not resolve on this node{why}: its processes would retry an address that never answers"
                    ),
                    match &vars[..] {
                        // srtctl writes node names into these whatever the addresses: the
                        // recipe's `environment:` replaces them.
                        [_, ..] => format!(
                            "make {host} resolve on every node (DNS, /etc/hosts), or give the address in the recipe's environment: ({}, with <ip> for {host})",
                            vars.join(", ")
                        ),
                        [] => format!(
                            "make {host} resolve on every node (DNS, /etc/hosts), or give its address in the recipe: mcsup.node_addresses: {{{host}: <ip>}}"
                        ),
                    },
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_read_from_urls_and_addresses() {
        assert_eq!(host_of("http://n1:2379").as_deref(), Some("n1"));
        assert_eq!(
            host_of("nats://user@infra-7:4222").as_deref(),
            Some("infra-7")
        );
        assert_eq!(host_of("n3:8700").as_deref(), Some("n3"));
        assert_eq!(host_of("http://[fe80::1]:80/x").as_deref(), Some("fe80::1"));
        assert_eq!(host_of("node0").as_deref(), Some("node0"));
    }

    #[test]
    fn a_name_that_does_not_resolve_fails_and_names_who_uses_it() {
        // RFC 6761: `.invalid` never resolves.
        assert!(resolve("mcsup-test.invalid", Duration::from_secs(5)).is_err());
        assert!(resolve("localhost", Duration::from_secs(5)).is_ok());
    }
}
