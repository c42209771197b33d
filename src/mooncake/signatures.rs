//! Mooncake's own failure lines, as its stores and the engines' Mooncake clients print them, each
//! with what it means and the fix. The supervisor watches the output of stores and workers for
//! them (`supervisor::watch::diagnosis`), with the engines' (`crate::engine::signatures`); a match is a
//! `diagnosis` event.
//!
//! The texts are the log lines' fixed parts, read from the pinned wheel's `store.so`/`engine.so`
//! (0.3.13.post1) and, for lines older releases print, from the upstream reports cited with each
//! signature. A signature matches when any of its needles occurs in a line (plain substrings, so
//! the watch can scan a whole chunk of output at once). Pure.

pub use crate::domain::signature::{Reported, Signature};

/// The catalogue, most specific first (a line is reported once, under the first signature it
/// matches).
pub const SIGNATURES: &[Signature] = &[
    Signature {
        id: "mkey-exhausted",
        needles: &["CREATE_MKEY failed"],
        what: "the NIC ran out of memory keys (they leak when RDMA clients are SIGKILLed, until the node reboots)",
        fix: "drain this node and have it rebooted (or the NIC driver reset); give Mooncake clients time to stop (a longer stop grace) so they deregister their memory",
        reported: Reported::AtOnce,
        source: "Mooncake docs/source/troubleshooting (MKEY exhaustion)",
    },
    Signature {
        id: "memory-registration",
        needles: &[
            "Failed to register memory",
            "Mooncake memory registration failed",
            "Failed to register local memory",
        ],
        what: "Mooncake could not register memory with the NIC, so the segment or buffer is smaller than asked or unusable",
        fix: "raise the locked-memory limit (ulimit -l unlimited for the job; `mcsup preflight` shows it), keep segments under the NIC's max_mr_size (MC_MAX_MR_SIZE), and check hugepages (/proc/sys/vm/nr_hugepages) when MC_STORE_USE_HUGEPAGE is set",
        reported: Reported::AtOnce,
        source: "rdma_context.cpp \"Failed to register memory\"; kvcache-ai/Mooncake #304, #640, #1382; sgl-project/sglang #6894",
    },
    Signature {
        id: "no-rnic",
        needles: &["No available RNIC"],
        what: "a transfer found no usable RDMA NIC for its memory",
        fix: "check that MOONCAKE_DEVICE / MC_MS_FILTERS list active HCAs near this memory (`mcsup preflight` lists the node's HCAs and their state)",
        reported: Reported::AtOnce,
        source: "rdma_transport.cpp \"RdmaTransport: No available RNIC\"",
    },
    Signature {
        id: "no-hca",
        needles: &["Found 0 HCAs", "No matched device found"],
        what: "the transfer engine found no usable RDMA device; with protocol rdma it falls back to TCP without an error",
        fix: "check that MOONCAKE_DEVICE names this node's HCAs, that /dev/infiniband is visible in the container, and `mcsup preflight`; set MOONCAKE_PROTOCOL=tcp if TCP is intended",
        reported: Reported::AtOnce,
        source: "topology.cpp / transfer_engine_impl.cpp \"Topology discovery complete. Found 0 HCAs.\" (measured with the pinned wheel)",
    },
    Signature {
        id: "rnic-inactive",
        needles: &[
            "mark it inactive",
            "marking inactive",
            "is now inactive due to",
            "local RNIC is inactive",
        ],
        what: "an RDMA NIC was marked inactive after repeated errors; transfers through it fail or move to other NICs until the process restarts",
        fix: "check the NIC's link and counters (ibstat, `mcsup preflight`), the cable and the switch port; restart the process once the link is clean",
        reported: Reported::AtOnce,
        source: "sgl-project/sglang #10560, #21395 (\"Too many errors ... mark it inactive\"); 0.3.13 \"consecutive attempts, marking inactive\"",
    },
    Signature {
        id: "context-inactive",
        needles: &["Context is not active"],
        what: "a transfer used an RDMA context that was deactivated (its NIC failed)",
        fix: "check the NIC's link (ibstat, `mcsup preflight`); the process keeps failing transfers on it until it restarts",
        reported: Reported::AtOnce,
        source: "rdma_transport.cpp \"Context is not active\"",
    },
    Signature {
        id: "qp-transition-failed",
        needles: &[
            "Failed to modify QP to RTR",
            "Failed to modify QP to RTS",
            "Failed to modify QP to INIT",
        ],
        what: "an RDMA queue pair to a peer could not be brought up (MTU, GID index or RoCE GID mismatch, or no path between the NICs)",
        fix: "check MC_MTU and the GID index (MC_GID_INDEX; `mcsup preflight` shows the one Mooncake picks), that both NICs share a reachable subnet and VLAN, and MC_IB_TC / MC_IB_SL if set; with \"Handshake request rejected by peer endpoint\" the fault is on the peer",
        reported: Reported::AtOnce,
        source: "rdma_endpoint.cpp \"[Handshake] Failed to modify QP to RTR, check mtu, gid, peer lid, peer qp num\" (in the pinned wheel); Mooncake docs troubleshooting.md",
    },
    Signature {
        id: "mount-segment-failed",
        needles: &["Failed to mount segment: "],
        what: "the store could not register its segment with the master (unreachable, or refused: size, protocol, a duplicate)",
        fix: "check that the master runs and its address (MOONCAKE_MASTER), the error code after the colon, and the segment size against the node's memory (`mcsup preflight`)",
        reported: Reported::AtOnce,
        source: "real_client.cpp \"Failed to mount segment: \" (in the pinned wheel's store.so)",
    },
    Signature {
        id: "master-unreachable-at-start",
        needles: &["Failed to create client after"],
        what: "the Mooncake client could not reach the master at set-up, after all its retries",
        fix: "start the master first (mcsup gates stores on it) and check MOONCAKE_MASTER's host and port from this node",
        reported: Reported::AtOnce,
        source: "real_client.cpp \"Failed to create client after N retries\" (in the pinned wheel's store.so)",
    },
    Signature {
        id: "version-mismatch",
        needles: &["Version mismatch: server="],
        what: "the master and this client are different Mooncake releases, so the master refuses it",
        fix: "run the master from the same mooncake-transfer-engine release as the stores and engines (mcsup pins 0.3.13.post1)",
        reported: Reported::AtOnce,
        source: "master_client.cpp \"Version mismatch: server=... client=...\" (in the pinned wheel's store.so)",
    },
    Signature {
        id: "metadata-etcd-unreachable",
        needles: &["EtcdStoragePlugin: unable to connect"],
        what: "the transfer engine cannot reach its metadata server (etcd)",
        fix: "check the metadata server URL and that etcd runs, or use P2PHANDSHAKE / http metadata",
        reported: Reported::AtOnce,
        source: "transfer_metadata_plugin.cpp \"EtcdStoragePlugin: unable to connect\" (in the pinned wheel's engine.so)",
    },
    Signature {
        id: "sglang-transfer-engine-init-failed",
        needles: &["Mooncake Transfer Engine initialization failed."],
        what: "SGLang could not initialise Mooncake's transfer engine; the cause is in the Mooncake lines before it",
        fix: "read the Mooncake lines before it (device, metadata server, handshake); check --disaggregation-ib-device names this node's HCAs",
        reported: Reported::AtOncePointer,
        source: "sglang 0.5.23 sglang/srt/distributed/device_communicators/mooncake_transfer_engine.py",
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::signature::first_match;

    fn matching(line: &[u8]) -> Option<&'static Signature> {
        first_match(SIGNATURES, line)
    }

    #[test]
    fn each_reported_line_finds_its_signature() {
        let cases: &[(&[u8], &str)] = &[
            (b"E0605 10:48:27.885119 10136 rdma_context.cpp:203] Failed to register memory 0x7b375b400000: Invalid argument [22]", "memory-registration"),
            (b"[2025-06-05 10:48:27 TP7] Mooncake memory registration failed.", "memory-registration"),
            (b"mlx5: host: CREATE_MKEY failed, syndrome 0x1", "mkey-exhausted"),
            (b"E1 rdma_transport.cpp:1] RdmaTransport: No available RNIC", "no-rnic"),
            (b"I1203 16:59:28.529983  4322 transfer_engine_impl.cpp:274] Topology discovery complete. Found 0 HCAs.", "no-hca"),
            (b"E1 worker_pool.cpp:1] Too many errors found in local RNIC mlx5_3, mark it inactive", "rnic-inactive"),
            (b"E1 x] Context is not active: mlx5_1", "context-inactive"),
            (b"E0822 13:12:18.123456 48213 rdma_endpoint.cpp:1195] [Handshake] Failed to modify QP to RTR, check mtu, gid, peer lid, peer qp num: local=mlx5_0, peer=node02@mlx5_0: Connection timed out", "qp-transition-failed"),
            (b"E0822 13:15:00.100000 50110 real_client.cpp:1078] Failed to mount segment: RPC_FAIL", "mount-segment-failed"),
            (b"E0822 13:15:30.000000 50110 real_client.cpp:865] Failed to create client after 20 retries", "master-unreachable-at-start"),
            (b"E0822 13:15:01.000000 50110 master_client.cpp:459] Version mismatch: server=0.3.9 client=0.3.13.post1", "version-mismatch"),
            (b"E0822 13:12:00.000000 48213 transfer_metadata_plugin.cpp:454] EtcdStoragePlugin: unable to connect etcd://node01:2379: context deadline exceeded", "metadata-etcd-unreachable"),
            (b"[2026-08-22 10:02:00 TP0] Mooncake Transfer Engine initialization failed.", "sglang-transfer-engine-init-failed"),
        ];
        for (line, id) in cases {
            assert_eq!(
                matching(line).map(|s| s.id),
                Some(*id),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        // Healthy lines of the pinned store and master.
        for line in [
            &b"I1203 16:57:10.942066 31764 real_client.cpp:1026] Mounting segment: 67108864 bytes, 67108864 of 67108864"[..],
            b"I1 x] Topology discovery complete with specified devices. Found 2 HCAs",
            b"E1203 16:57:21.981921 31794 client_service.cpp:4857] Failed to ping master",
            // A retry that may still work, and a peer not up yet.
            b"W0822 13:15:10.000000 50110 real_client.cpp:858] Failed to create client on port 12345, retry 1/20",
            b"W0822 13:12:19.000001 48213 transfer_metadata.cpp:1067] Failed to retrieve segment descriptor, name 10.0.0.12:15043",
        ] {
            assert_eq!(matching(line), None);
        }
    }
}
