//! The dependency graph: whether a dependency is met, and the teardown level of each process
//! (which also rejects dependency cycles).

use super::*;

impl Machine {
    /// Whether the dependency holds now, can never hold, or may hold later.
    pub(super) fn dep_status(&self, target: UnitRef, cond: DependencyCondition) -> DepStatus {
        match target {
            UnitRef::Gate(g) => match (&self.gates[g].state, cond) {
                (_, DependencyCondition::Started) => DepStatus::Met,
                (GateState::Ready, _) => DepStatus::Met,
                (GateState::Failed | GateState::Cancelled, _) => DepStatus::Never,
                (GateState::Probing(_), _) => DepStatus::Pending,
            },
            UnitRef::Proc(j) => {
                let t = &self.procs[j];
                match (&t.state, cond) {
                    (
                        ProcState::Starting { .. } | ProcState::Ready { .. },
                        DependencyCondition::Started,
                    ) => DepStatus::Met,
                    (ProcState::Ready { .. }, DependencyCondition::Healthy) => DepStatus::Met,
                    (ProcState::Exited, DependencyCondition::CompletedSuccessfully)
                        if t.last_success =>
                    {
                        DepStatus::Met
                    }
                    (ProcState::Exited | ProcState::Failed, _) => DepStatus::Never,
                    _ => DepStatus::Pending,
                }
            }
        }
    }

    pub(super) fn unit_name(&self, u: UnitRef) -> &str {
        match u {
            UnitRef::Gate(g) => &self.gates[g].spec.name,
            UnitRef::Proc(p) => &self.procs[p].spec.name,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DepStatus {
    Met,
    Pending,
    Never,
}

/// Teardown waves: `level(p) = max(tier(p), 1 + max(level(d)) over p's dependents d)`, so a
/// process stops after everything that depends on it and after every lower tier (workers, then
/// the store, then the master). Also rejects dependency cycles.
pub(super) fn stop_levels(
    procs: &[ProcessSpec],
    deps: &[Vec<(UnitRef, DependencyCondition)>],
) -> Result<Vec<u32>, PlanError> {
    let n = procs.len();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, d) in deps.iter().enumerate() {
        for (t, _) in d {
            if let UnitRef::Proc(j) = t {
                dependents[*j].push(i);
            }
        }
    }
    // 0 = unvisited, 1 = on the stack, 2 = done.
    let mut mark = vec![0u8; n];
    let mut level = vec![0u32; n];
    pub(super) fn visit(
        i: usize,
        procs: &[ProcessSpec],
        dependents: &[Vec<usize>],
        mark: &mut [u8],
        level: &mut [u32],
    ) -> Result<u32, PlanError> {
        match mark[i] {
            2 => return Ok(level[i]),
            1 => {
                return Err(PlanError(format!(
                    "dependency cycle through process `{}`",
                    procs[i].name
                )));
            }
            _ => {}
        }
        mark[i] = 1;
        let mut l = u32::from(procs[i].teardown_tier());
        for &d in &dependents[i] {
            l = l.max(visit(d, procs, dependents, mark, level)? + 1);
        }
        mark[i] = 2;
        level[i] = l;
        Ok(l)
    }
    for i in 0..n {
        visit(i, procs, &dependents, &mut mark, &mut level)?;
    }
    Ok(level)
}
