//! Mooncake's own failure lines, as its stores and the engines' Mooncake clients print them, each
//! with what it means and the fix. The supervisor watches the output of stores and workers for
//! them (`supervisor::logs::Watch`); a match is a `diagnosis` event.
//!
//! The texts are the log lines' fixed parts, read from the pinned wheel's `store.so`/`engine.so`
//! (0.3.13.post1) and, for lines older releases print, from the upstream reports cited with each
//! signature. A signature matches when any of its needles occurs in a line (plain substrings, so
//! the watch can scan a whole chunk of output at once). Pure.

/// Bumped when a signature is added, removed or its meaning changes (events name it).
pub const CATALOGUE_VERSION: u32 = 1;

/// One known failure line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signature {
    /// Stable name (`rnic-inactive`), in the event.
    pub id: &'static str,
    /// Substrings any of which marks the line.
    pub needles: &'static [&'static str],
    /// What it means, in one clause.
    pub what: &'static str,
    pub fix: &'static str,
    /// Where the line and its meaning come from.
    pub source: &'static str,
}

/// The catalogue, most specific first (a line is reported once, under the first signature it
/// matches).
pub const SIGNATURES: &[Signature] = &[
    Signature {
        id: "mkey-exhausted",
        needles: &["CREATE_MKEY failed"],
        what: "the NIC ran out of memory keys (they leak when RDMA clients are SIGKILLed, until the node reboots)",
        fix: "drain this node and have it rebooted (or the NIC driver reset); give Mooncake clients time to stop (a longer stop grace) so they deregister their memory",
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
        source: "rdma_context.cpp \"Failed to register memory\"; kvcache-ai/Mooncake #304, #640, #1382; sgl-project/sglang #6894",
    },
    Signature {
        id: "no-rnic",
        needles: &["No available RNIC"],
        what: "a transfer found no usable RDMA NIC for its memory",
        fix: "check that MOONCAKE_DEVICE / MC_MS_FILTERS list active HCAs near this memory (`mcsup preflight` lists the node's HCAs and their state)",
        source: "rdma_transport.cpp \"RdmaTransport: No available RNIC\"",
    },
    Signature {
        id: "no-hca",
        needles: &["Found 0 HCAs", "No matched device found"],
        what: "the transfer engine found no usable RDMA device; with protocol rdma it falls back to TCP without an error",
        fix: "check that MOONCAKE_DEVICE names this node's HCAs, that /dev/infiniband is visible in the container, and `mcsup preflight`; set MOONCAKE_PROTOCOL=tcp if TCP is intended",
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
        source: "sgl-project/sglang #10560, #21395 (\"Too many errors ... mark it inactive\"); 0.3.13 \"consecutive attempts, marking inactive\"",
    },
    Signature {
        id: "context-inactive",
        needles: &["Context is not active"],
        what: "a transfer used an RDMA context that was deactivated (its NIC failed)",
        fix: "check the NIC's link (ibstat, `mcsup preflight`); the process keeps failing transfers on it until it restarts",
        source: "rdma_transport.cpp \"Context is not active\"",
    },
];

/// The signature a line matches, if any (first in catalogue order).
pub fn matching(line: &[u8]) -> Option<&'static Signature> {
    SIGNATURES.iter().find(|s| {
        s.needles
            .iter()
            .any(|n| memchr::memmem::find(line, n.as_bytes()).is_some())
    })
}

/// The event detail for a matched line.
pub fn describe(s: &Signature, line: &[u8]) -> String {
    const MAX: usize = 400;
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end();
    let shown: String = text.chars().take(MAX).collect();
    let cut = if shown.len() < text.len() { " …" } else { "" };
    format!(
        "Mooncake {} ({}): {shown}{cut} | fix: {} | source: {}",
        s.id, s.what, s.fix, s.source
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
        ] {
            assert_eq!(matching(line), None);
        }
        let ids: std::collections::BTreeSet<_> = SIGNATURES.iter().map(|s| s.id).collect();
        assert_eq!(ids.len(), SIGNATURES.len(), "ids are unique");
    }

    #[test]
    fn the_detail_carries_the_line_the_fix_and_the_source() {
        let s = matching(b"x mark it inactive\n").unwrap();
        let d = describe(s, b"x mark it inactive\n");
        assert!(
            d.starts_with("Mooncake rnic-inactive (an RDMA NIC was marked inactive"),
            "{d}"
        );
        assert!(
            d.contains("): x mark it inactive | fix: check the NIC"),
            "{d}"
        );
        assert!(d.contains("source: sgl-project/sglang #10560"), "{d}");
        let long = vec![b'a'; 2000];
        assert!(describe(s, &long).contains("a …"));
    }
}
