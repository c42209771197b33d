# shellcheck shell=bash disable=SC2034  # sourced: the arrays are read by the scripts that source it
# What the project needs from apt, in one place: scripts/setup.sh installs APT_PACKAGES and
# RUNTIME_LIBS, scripts/test.sh TEST_PACKAGES too, and both check them.

APT_PACKAGES=(
  libibverbs-dev librdmacm-dev libclang-dev ibverbs-providers pkg-config python3-venv
  ca-certificates etcd-server nats-server etcd-client iproute2
  chromium nginx-light shellcheck
  qemu-user-static libc6-arm64-cross libgcc-s1-arm64-cross binutils
  fuse3
)
# Packages from APT_PACKAGES that ship a system service, as package:service. We only want their
# binaries. On a fresh install their postinst enables the service for boot (systemd unit links,
# SysV rc links for etcd) and starts it now where an init system runs: under systemd both; under
# sysvinit (or wherever a policy-rc.d allows it) etcd via invoke-rc.d. In a container without
# systemd and without a runlevel nothing starts. A system etcd on 127.0.0.1:2379/2380 or nats on
# 127.0.0.1:4222 would take ports the tests use, so after installing one of these packages we
# stop and disable its service (section 1b). Never done for packages that were already
# installed: a service the user runs on purpose is left alone.
SERVICE_PACKAGES=(
  etcd-server:etcd
  nats-server:nats-server
  nginx-light:nginx
)
# Run-time libraries that the wheel's native code (mooncake_master, store.so, engine.so) links
# from the system (found with ldd; everything else is bundled in the wheel). Checked by soname
# with ldconfig, because package names differ between releases (e.g. Ubuntu 24.04's libcurl4t64).
# Format: soname:debian-package
RUNTIME_LIBS=(
  libibverbs.so.1:libibverbs1
  librdmacm.so.1:librdmacm1
  libnuma.so.1:libnuma1
  libcurl.so.4:libcurl4
  libfuse.so.2:libfuse2
)
# The Slurm tests' private clusters and the MPI endpoint tests: libpmix2 and libpmix-dev for
# srun --mpi=pmix (the plugin dlopens libpmix.so, which only -dev has); Open MPI and mpi4py for
# the ranks.
TEST_PACKAGES=(
  slurmctld slurmd slurm-client munge libpmix2 libpmix-dev openmpi-bin python3-mpi4py
)
