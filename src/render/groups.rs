//! The job view's groups: every unit of the job under the role it serves, so that 128 nodes read
//! as four lines (`status --job`) or four bars (`timeline`). A worker's group is its roles
//! (`prefill`, `decode`, `aggregated`); a store or a gate without roles belongs to its node's
//! roles (it serves that node's workers, or holds up their start); the job's etcd, NATS, master
//! and services are `infra`; frontends `frontend`. Pure.

use std::collections::HashMap;

use crate::runfiles::{StatusFile, StatusRoles, UnitKind, UnitState};

/// A group of the job view, in the order the view shows them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Group {
    rank: u8,
    pub name: String,
}

impl Group {
    fn named(name: String) -> Group {
        let rank = match name.as_str() {
            "infra" => 0,
            "frontend" => 1,
            "prefill" => 2,
            "decode" => 3,
            "aggregated" => 4,
            // Units of a node without a status file (an older mcsup, a lost file).
            UNKNOWN => 6,
            _ => 5,
        };
        Group { rank, name }
    }

    /// The group of a unit whose node wrote no status (its kind and roles are not known).
    pub fn unknown() -> Group {
        Group::named(UNKNOWN.into())
    }
}

const UNKNOWN: &str = "processes";

/// The group of a unit of kind `kind` serving `roles`, on a node whose roles are `node_roles`.
pub fn group_of(kind: UnitKind, roles: &[String], node_roles: &[String]) -> Group {
    let node = |r: &[String]| (!r.is_empty()).then(|| r.join("+"));
    let name = match kind {
        _ if !roles.is_empty() => roles.join("+"),
        UnitKind::Master | UnitKind::Service => "infra".into(),
        UnitKind::Frontend => "frontend".into(),
        UnitKind::Benchmark => "benchmark".into(),
        UnitKind::Store | UnitKind::Gate => node(node_roles).unwrap_or_else(|| "infra".into()),
        UnitKind::Worker | UnitKind::Other => {
            node(node_roles).unwrap_or_else(|| kind.as_str().into())
        }
    };
    Group::named(name)
}

/// Each unit's group, by node and unit name, from the nodes' status files.
#[derive(Debug, Default)]
pub struct Groups(HashMap<String, HashMap<String, Group>>);

impl Groups {
    /// From the status files there are (a node without one has its units in the unknown group).
    pub fn from_status<'a>(files: impl IntoIterator<Item = &'a StatusRoles>) -> Groups {
        Groups(
            files
                .into_iter()
                .map(|s| {
                    let units = s
                        .units
                        .iter()
                        .map(|u| (u.name.clone(), group_of(u.kind, &u.roles, &s.roles)))
                        .collect();
                    (s.node.clone(), units)
                })
                .collect(),
        )
    }

    /// The group of `unit` on `node`.
    pub fn of(&self, node: &str, unit: &str) -> Group {
        self.0
            .get(node)
            .and_then(|units| units.get(unit))
            .cloned()
            .unwrap_or_else(Group::unknown)
    }
}

/// One group of the job, as `status --job` sums it up: `decode: 64 node(s), 63/64 ready; 128
/// process(es): 127 ready, 1 failed; 2 restart(s)`.
#[derive(Debug)]
pub struct Summary<'a> {
    pub group: Group,
    /// The nodes with units of the group, in the job's order.
    pub nodes: Vec<&'a str>,
    /// Those whose units of the group are all ready.
    pub nodes_ready: usize,
    /// Those whose mcsup has not finished.
    pub nodes_running: usize,
    /// Processes (gates are not) by state, in the order of [`UnitState::ALL`].
    pub states: Vec<(UnitState, usize)>,
    pub processes: usize,
    pub restarts: u64,
}

impl Summary<'_> {
    /// The line `status --job` prints.
    pub fn text(&self) -> String {
        let states: Vec<String> = self
            .states
            .iter()
            .map(|(s, n)| format!("{n} {s}"))
            .collect();
        // Once every node is done, nothing is ready: the states say how they ended.
        let ready = if self.nodes_running > 0 {
            format!(", {}/{} ready", self.nodes_ready, self.nodes.len())
        } else {
            String::new()
        };
        let mut line = format!(
            "{}: {} node(s){ready}; {} process(es)",
            self.group.name,
            self.nodes.len(),
            self.processes
        );
        if !states.is_empty() {
            line.push_str(": ");
            line.push_str(&states.join(", "));
        }
        if self.restarts > 0 {
            line.push_str(&format!("; {} restart(s)", self.restarts));
        }
        line
    }

    /// The same, for `--json`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "role": self.group.name,
            "nodes": self.nodes.len(),
            "nodes_ready": self.nodes_ready,
            "nodes_running": self.nodes_running,
            "processes": self.processes,
            "states": self.states.iter().map(|(s, n)| (s.as_str().to_string(), serde_json::json!(n))).collect::<serde_json::Map<_, _>>(),
            "restarts": self.restarts,
            "nodes_list": crate::node::compress_nodelist(&self.nodes),
        })
    }
}

/// Every group of the job in `nodes` (each node's status file), in the view's order. One pass
/// over the units.
pub fn summaries<'a>(files: &[&'a StatusFile]) -> Vec<Summary<'a>> {
    let mut by_group: std::collections::BTreeMap<Group, Summary> = Default::default();
    for s in files {
        // This node's part of each group: (all ready so far).
        let mut here: HashMap<Group, bool> = HashMap::new();
        for u in s.units.iter().filter(|u| u.kind != UnitKind::Gate) {
            let g = group_of(u.kind, &u.roles, &s.roles);
            let sum = by_group.entry(g.clone()).or_insert_with(|| Summary {
                group: g.clone(),
                nodes: Vec::new(),
                nodes_ready: 0,
                nodes_running: 0,
                states: Vec::new(),
                processes: 0,
                restarts: 0,
            });
            sum.processes += 1;
            sum.restarts += u64::from(u.restarts);
            match sum.states.iter_mut().find(|(st, _)| *st == u.state) {
                Some((_, n)) => *n += 1,
                None => sum.states.push((u.state, 1)),
            }
            let ready = here.entry(g).or_insert(true);
            *ready &= u.state == UnitState::Ready;
        }
        for (g, ready) in here {
            if let Some(sum) = by_group.get_mut(&g) {
                sum.nodes.push(&s.node);
                sum.nodes_ready += usize::from(ready);
                sum.nodes_running += usize::from(s.exit_code.is_none());
            }
        }
    }
    let rank = |s: UnitState| {
        UnitState::ALL
            .iter()
            .position(|x| *x == s)
            .unwrap_or(usize::MAX)
    };
    by_group
        .into_values()
        .map(|mut sum| {
            sum.states.sort_by_key(|(s, _)| rank(*s));
            sum
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runfiles::StatusProcess;

    fn unit(name: &str, kind: &str, roles: &[&str]) -> StatusProcess {
        let mut u = crate::render::status_tests::sample().units.remove(0);
        u.name = name.into();
        u.kind = kind.into();
        u.roles = roles.iter().map(|r| r.to_string()).collect();
        u
    }

    #[test]
    fn units_go_to_the_role_they_serve_and_the_rest_to_infra_or_frontend() {
        let decode = ["decode".to_string()];
        for (u, node_roles, group) in [
            (
                unit("sglang-decode-0", "worker", &["decode"]),
                &[][..],
                "decode",
            ),
            (unit("store-decode", "store", &[]), &decode[..], "decode"),
            (
                unit("mooncake-master@n1", "gate", &[]),
                &decode[..],
                "decode",
            ),
            (unit("mooncake-master", "master", &[]), &decode[..], "infra"),
            (unit("etcd", "service", &[]), &[][..], "infra"),
            (unit("store", "store", &[]), &[][..], "infra"),
            (unit("frontend_1", "frontend", &[]), &decode[..], "frontend"),
            (
                unit("w", "worker", &["prefill", "decode"]),
                &[][..],
                "prefill+decode",
            ),
            (unit("w", "worker", &[]), &[][..], "worker"),
        ] {
            assert_eq!(
                group_of(u.kind, &u.roles, node_roles).name,
                group,
                "{}",
                u.name
            );
        }
        let mut order: Vec<Group> = [
            "decode",
            "zeta",
            "processes",
            "prefill",
            "frontend",
            "infra",
        ]
        .map(|n| Group::named(n.into()))
        .to_vec();
        order.sort();
        let names: Vec<&str> = order.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "infra",
                "frontend",
                "prefill",
                "decode",
                "zeta",
                "processes"
            ]
        );
    }

    #[test]
    fn a_running_job_counts_the_nodes_ready_per_role_and_a_finished_one_how_it_ended() {
        let node = |name: &str, states: &[&str], restarts: u32| {
            let mut s = crate::render::status_tests::sample();
            s.node = name.into();
            s.roles = vec!["decode".into()];
            s.units = states
                .iter()
                .enumerate()
                .map(|(i, st)| {
                    let mut u = unit(&format!("w{i}"), "worker", &["decode"]);
                    u.state = (*st).into();
                    u.restarts = restarts;
                    u
                })
                .collect();
            s.units.push(unit("master@n1", "gate", &[]));
            s.units.push(unit("etcd", "service", &[]));
            s
        };
        let mut files = [
            node("n1", &["ready", "ready"], 0),
            node("n2", &["ready", "starting"], 1),
        ];
        let refs: Vec<&StatusFile> = files.iter().collect();
        let lines: Vec<String> = summaries(&refs).iter().map(Summary::text).collect();
        assert_eq!(
            lines,
            [
                "infra: 2 node(s), 2/2 ready; 2 process(es): 2 ready",
                "decode: 2 node(s), 1/2 ready; 4 process(es): 1 starting, 3 ready; 2 restart(s)",
            ]
        );
        for f in &mut files {
            f.exit_code = Some(0);
            for u in &mut f.units {
                u.state = "exited".into();
            }
        }
        let refs: Vec<&StatusFile> = files.iter().collect();
        assert_eq!(
            summaries(&refs)[1].text(),
            "decode: 2 node(s); 4 process(es): 4 exited; 2 restart(s)"
        );
    }
}
