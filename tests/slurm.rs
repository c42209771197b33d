//! The tests under a real local Slurm (scripts/slurm/cluster.sh), as one binary.

mod common;

mod slurm_e2e;
