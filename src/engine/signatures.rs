//! The engines' known failure lines (and the CUDA, NCCL, UCX/NIXL, Hugging Face, Python and OS
//! lines they print), each with what it means and the fix; Mooncake's are in
//! `crate::mooncake::signatures`. The supervisor watches every child's output for them
//! (`supervisor::watch::diagnosis`); a match is a `diagnosis` event.
//!
//! Each needle is a fixed part of the line as its source prints it, cited with the signature
//! (read from the sources of sglang 0.5.23, vLLM 0.34.0, PyTorch, NCCL, UCX, NIXL,
//! huggingface_hub 2.4.0, filelock 4.3.2 and the strings of ai-dynamo-runtime 1.6.1). Lines that
//! healthy runs print too are left out on purpose: NCCL's `NCCL WARN Call to bind failed: Address
//! already in use` (so `address-in-use` takes only anchored forms), Dynamo's "etcd not reachable
//! yet; retrying" (only the final timeout counts), huggingface_hub's "Still waiting to acquire
//! lock" (several ranks downloading at once), UCX's bare `UCX  ERROR` (peers disconnecting at
//! teardown). Most specific first: a line is reported under the first signature it matches.
//! Pure.

pub use crate::domain::signature::{Reported, Signature};

/// A signature reported as soon as its line is seen.
const fn at_once(
    id: &'static str,
    needles: &'static [&'static str],
    what: &'static str,
    fix: &'static str,
    source: &'static str,
) -> Signature {
    Signature {
        id,
        needles,
        what,
        fix,
        source,
        reported: Reported::AtOnce,
    }
}

/// A signature reported at once whose line only points at the cause, printed elsewhere.
const fn pointer(
    id: &'static str,
    needles: &'static [&'static str],
    what: &'static str,
    fix: &'static str,
    source: &'static str,
) -> Signature {
    Signature {
        reported: Reported::AtOncePointer,
        ..at_once(id, needles, what, fix, source)
    }
}

/// The catalogue, most specific first.
pub const SIGNATURES: &[Signature] = &[
    at_once(
        "vllm-insufficient-free-memory",
        &["is less than desired GPU memory utilization"],
        "at start-up another process already holds memory on this GPU, so the share of total memory vLLM asks for is not free",
        "stop what holds the GPU (a previous job's engine: nvidia-smi), or lower --gpu-memory-utilization (a share of total, not of free, memory)",
        "vllm/v1/worker/utils.py (vLLM 0.34.0) \"Free memory on device ... on startup is less than desired GPU memory utilization\"",
    ),
    at_once(
        "vllm-kv-cache-too-small",
        &[
            "cache is needed, which is larger than the available KV cache memory",
            "is larger than the maximum number of tokens that can be stored in KV cache",
        ],
        "the KV cache left after the weights cannot hold one request of the model's max length",
        "lower --max-model-len (the message gives the largest that fits), raise --gpu-memory-utilization, or add tensor parallelism",
        "vllm/v1/core/kv_cache_planning.py (vLLM 0.34.0); vllm-project/vllm #2418 (older wording)",
    ),
    at_once(
        "vllm-no-kv-cache-memory",
        &["No available memory for the cache blocks"],
        "the weights, activations and CUDA graphs used the whole budget: no memory is left for the KV cache",
        "raise --gpu-memory-utilization, use more tensor parallelism or a quantised model, or lower --max-num-seqs / --max-num-batched-tokens",
        "vllm/v1/core/kv_cache_planning.py (vLLM 0.34.0)",
    ),
    at_once(
        "sglang-not-enough-memory",
        &["Not enough memory. Please try to increase --mem-fraction-static"],
        "after the weights, no memory is left for SGLang's KV pool",
        "raise --mem-fraction-static, or use more GPUs (TP/EP) or a smaller or quantised model",
        "sglang/srt/model_executor/pool_configurator.py (sglang 0.5.23; model_runner.py in older releases)",
    ),
    at_once(
        "sglang-cuda-graph-capture-failed",
        &["Capture cuda graph failed:"],
        "SGLang could not capture its CUDA graphs at start-up (usually out of memory)",
        "lower --mem-fraction-static to leave room for the graphs, or lower --cuda-graph-max-bs-decode",
        "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py (sglang 0.5.23)",
    ),
    at_once(
        "sglang-disagg-page-size-mismatch",
        &[
            "Page size mismatch: prefill server has page_size=",
            "KV cache dtype mismatch: prefill server has kv_cache_dtype=",
        ],
        "prefill and decode workers run with different --page-size (or KV cache dtype), found when decode first reaches prefill",
        "give every prefill and decode role the same --page-size and --kv-cache-dtype (check per-role overrides)",
        "sglang/srt/disaggregation/common/conn.py (sglang 0.5.23); NVIDIA/srt-slurm #429",
    ),
    at_once(
        "sglang-kv-transfer-failed",
        &[
            "Prefill transfer failed for request rank=",
            "Decode transfer failed for request rank=",
        ],
        "a request's KV cache did not move from its prefill worker to its decode worker (the request is aborted): every such request is lost, and a benchmark that goes on measures nothing",
        "read the lines before it (Mooncake's transfer engine says why: memory registration needs nvidia_peermem for GPU memory, an inactive HCA, a dead peer); `mcsup preflight` checks the NICs and locked memory",
        "sglang/srt/disaggregation/prefill.py and decode.py `handle_inflight_transfer_failure` (sglang 0.5.23); NVIDIA/srt-slurm #429",
    ),
    at_once(
        "trtllm-executor-init-failed",
        &["Failed to initialize executor on rank"],
        "TensorRT-LLM could not build its executor; the text after the colon is why",
        "read the cause after the colon: for out of memory lower free_gpu_memory_fraction or the batch sizes; for an unknown model type, a TensorRT-LLM that supports it",
        "NVIDIA/TensorRT-LLM tensorrt_llm/executor/worker.py (worker_main)",
    ),
    at_once(
        "cuda-oom",
        &["CUDA out of memory. Tried to allocate", "CUDA error: out of memory"],
        "the GPU ran out of memory",
        "lower the engine's memory share (SGLang --mem-fraction-static, vLLM --gpu-memory-utilization), its batch or context size, or use more GPUs; check that no earlier job still holds the GPU (nvidia-smi)",
        "pytorch c10/cuda/CUDACachingAllocator.cpp (torch.OutOfMemoryError); C10_CUDA_CHECK for cudaErrorMemoryAllocation",
    ),
    at_once(
        "cuda-illegal-memory-access",
        &["an illegal memory access was encountered"],
        "a GPU kernel faulted (an engine or kernel bug, rarely bad hardware); the CUDA context is unusable",
        "restart the worker; reproduce with CUDA_LAUNCH_BLOCKING=1, try another attention backend or turn the suspect feature off, and look for Xid errors in the node's dmesg",
        "CUDA runtime cudaErrorIllegalAddress; sgl-project/sglang #8336, #8296; vllm-project/vllm #6976",
    ),
    at_once(
        "cuda-no-device",
        &["no CUDA-capable device is detected"],
        "the process sees no GPU",
        "check the job's GPU request (--gres=gpu:N, --gpus-per-node), CUDA_VISIBLE_DEVICES, and the container's GPU hooks (enroot/pyxis, --nv)",
        "CUDA runtime cudaErrorNoDevice; microsoft/nni #2916",
    ),
    at_once(
        "cuda-driver-too-old",
        &["CUDA driver version is insufficient for CUDA runtime version"],
        "the container's CUDA runtime is newer than the node's driver supports",
        "use an image built for the node's driver (nvidia-smi shows its CUDA version), or update the driver",
        "CUDA runtime cudaErrorInsufficientDriver; ovg-project/kvcached #74",
    ),
    at_once(
        "nccl-watchdog-timeout",
        &[
            "Watchdog caught collective operation timeout",
            "Some NCCL operations have failed or timed out",
        ],
        "a collective hung for the whole process-group timeout: a peer rank is stuck or dead, or the fabric is down",
        "find the rank that stopped first (often a crashed peer on another node: `mcsup why`) and check the interconnect; a longer timeout only hides it",
        "pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp",
    ),
    at_once(
        "nccl-error",
        &[
            "NCCL error in:",
            "ncclUnhandledCudaError: Call to CUDA function failed.",
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
            "ncclInternalError: Internal check failed.",
            "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
            "NCCL watchdog thread terminated with exception",
        ],
        "an NCCL collective failed (a remote error usually means another rank died first)",
        "find the first rank that failed (not one reporting ncclRemoteError); check NCCL_SOCKET_IFNAME, NCCL_IB_HCA and the links; rerun with NCCL_DEBUG=INFO",
        "pytorch torch/csrc/distributed/c10d/NCCLUtils.hpp (C10D_NCCL_CHECK); NVIDIA/nccl src/init.cc (ncclGetErrorString)",
    ),
    at_once(
        "torch-store-timeout",
        &["DistStoreError: Timed out after", "seconds waiting for clients."],
        "rank 0's rendezvous store waited for every rank and some never connected (crashed, wrong --dist-init-addr, never started)",
        "check that every node's worker started and can reach dist-init-addr:port; the other nodes' logs hold the real error (`mcsup why`)",
        "pytorch test/distributed/test_store.py (TCPStore \"Timed out after N seconds waiting for clients\")",
    ),
    at_once(
        "ucx-no-usable-transports",
        &["no usable transports/devices"],
        "UCX_TLS / UCX_NET_DEVICES match no usable device on this node",
        "list the node's devices (ucx_info -d, `mcsup preflight`) and name ACTIVE ones in UCX_NET_DEVICES; keep a TCP or loopback device when NIXL needs its self endpoint (sgl-project/sglang #40641)",
        "openucx/ucx src/ucp/core/ucp_context.c",
    ),
    at_once(
        "ucx-gdaki-init-failure",
        &[
            "gdaki channel chunk init: create_cq/qp failed",
            "Failed to allocate memory pool (name=gdaki_channel_pool)",
        ],
        "UCX's GPU-initiated RC transport (rc_gda) could not create its queues on an HCA (inactive, a management NIC, or unsupported)",
        "set UCX_NET_DEVICES to this node's active, GPU-near HCAs instead of `all` (`mcsup preflight` lists them), or leave rc_gda out of UCX_TLS",
        "openucx/ucx src/uct/ib/mlx5/gdaki/gdaki.c; sgl-project/sglang #27894; NVIDIA/srt-slurm #429",
    ),
    at_once(
        "nixl-backend-init-failed",
        &[
            "nixlBackendError: NIXL_ERR_BACKEND",
            "backend initialization error for '",
            "backend creation failed for '",
            "encountered error during intra-agent transfer setup with status",
            "createBackend: unsupported backend '",
        ],
        "NIXL could not create its UCX backend (device selection, a second UCX on the library path, or a missing plugin)",
        "set UCX_NET_DEVICES to the active GPU-near NICs and keep tcp/lo; have one UCX on the library path; for an unsupported backend check NIXL_PLUGIN_DIR",
        "ai-dynamo/nixl src/core/nixl_agent.cpp; ai-dynamo/dynamo #10852 (UCX_NET_DEVICES=all)",
    ),
    at_once(
        "address-in-use",
        &[
            "[Errno 98] Address already in use",
            "Address already in use (os error 98)",
            "name: EADDRINUSE",
            "Failed to bind server to address",
        ],
        "a port it needs is held by another process, often a leftover of an earlier job on this node",
        "find the holder (`ss -ltnp 'sport = :PORT'`) and stop it, or give the job other ports; `mcsup preflight` checks the planned ones",
        "CPython OSError errno 98; Rust std (os error 98); pytorch c10d socket; ai-dynamo/dynamo #3587 (Failed to bind server to address)",
    ),
    at_once(
        "disk-full",
        &["No space left on device"],
        "a file system filled up (the model cache, a compile cache, /tmp, /dev/shm or the logs)",
        "free space, or point HF_HOME, TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR and TMPDIR at a larger volume; check the node's /tmp and /dev/shm sizes",
        "strerror(ENOSPC); vllm-project/vllm #7025",
    ),
    at_once(
        "too-many-open-files",
        &["Too many open files"],
        "the process hit its open-file limit (connections, ZMQ sockets, files)",
        "raise the limit before the engine starts (ulimit -n 65536 in the job or container); Slurm can pass a low soft limit on",
        "strerror(EMFILE); vllm-project/vllm #7920",
    ),
    at_once(
        "fatal-signal",
        &[
            "Fatal Python error: Segmentation fault",
            "Fatal Python error: Aborted",
            "Fatal Python error: Bus error",
            "Fatal Python error: Illegal instruction",
            "Fatal Python error: Floating point exception",
            "terminate called after throwing an instance of",
            "Segmentation fault (core dumped)",
        ],
        "a native crash (segmentation fault, abort, uncaught C++ exception) in the engine or a library",
        "look for the first error before the crash (a CUDA or NCCL error often causes the abort); for a plain segfault pin known-good engine and kernel library versions and collect a core",
        "CPython Modules/faulthandler.c; libstdc++ terminate handler; sgl-project/sglang #4673, #9152",
    ),
    at_once(
        "hf-filelock-timeout",
        &["' could not be acquired."],
        "a Hugging Face download lock could not be taken: another process holds it, or a killed download left it",
        "download the model once before the job (hf download) and run with HF_HUB_OFFLINE=1; if no download is alive, remove the stale *.lock files under $HF_HOME/hub/.locks/",
        "filelock 4.3.2 filelock/_core/_errors.py (Timeout: \"The file lock '...' could not be acquired.\")",
    ),
    at_once(
        "hf-offline-not-cached",
        &[
            "Cannot find the requested files in the disk cache and outgoing traffic has been disabled",
            "Cannot find an appropriate cached snapshot folder for the specified revision on the local disk and outgoing traffic has been disabled",
            "We couldn't connect to '",
        ],
        "the node is offline (or HF_HUB_OFFLINE=1) and the model or revision is not in the cache HF_HOME points to",
        "fill the cache on shared storage and point HF_HOME (or HF_HUB_CACHE) at it, or give a local model path; check the revision",
        "huggingface_hub 2.4.0 file_download.py, _snapshot_download.py; transformers 5.24.0 utils/hub.py",
    ),
    at_once(
        "hf-repo-not-found-or-gated",
        &[
            "Repository Not Found for url:",
            "Cannot access gated repo for url",
            "You are trying to access a gated repo.",
        ],
        "the model id is wrong, or the repository is gated or private and the job has no token with access",
        "check the model id; set HF_TOKEN for an account that accepted the model's licence, or use a local path",
        "huggingface_hub 2.4.0 utils/_http.py; transformers 5.24.0 utils/hub.py",
    ),
    at_once(
        "dynamo-etcd-unreachable",
        &["etcd startup connection timed out after"],
        "a Dynamo process could not reach etcd (ETCD_ENDPOINTS) within its start-up deadline",
        "start etcd before the Dynamo processes (mcsup gates them on it), and check ETCD_ENDPOINTS' host and port from this node",
        "ai-dynamo/dynamo lib/runtime/src/transports/etcd.rs (connect_with_startup_retry); ai-dynamo-runtime 1.6.1",
    ),
    at_once(
        "dynamo-nats-unreachable",
        &["NATS startup connection timed out after"],
        "a Dynamo process could not reach NATS (NATS_SERVER) within its start-up deadline",
        "start nats-server (with -js) first, check NATS_SERVER from this node, or raise NATS_STARTUP_CONNECT_TIMEOUT_SECONDS",
        "ai-dynamo/dynamo lib/runtime/src/transports/nats.rs; ai-dynamo-runtime 1.6.1",
    ),
    pointer(
        "vllm-engine-core-init-failed",
        &["Engine core initialization failed. See root cause above."],
        "vLLM's engine core died while starting; the cause is an earlier line",
        "read the lines before it in the log (a more specific diagnosis usually precedes this one)",
        "vllm/v1/engine/utils.py (vLLM 0.34.0)",
    ),
    pointer(
        "sglang-scheduler-exception",
        &[
            "Scheduler hit an exception:",
            "TokenizerManager hit an exception:",
            "DetokenizerManager hit an exception:",
            "DataParallelController hit an exception:",
        ],
        "an SGLang subprocess hit an exception and is about to die; the cause is the traceback's last line",
        "read the traceback that follows (a more specific diagnosis usually names it)",
        "sglang/srt/managers/scheduler.py (sglang 0.5.23)",
    ),
    Signature {
        id: "python-exception",
        needles: &["Traceback (most recent call last):"],
        what: "the last exception the process printed before it failed",
        fix: "read the exception and the frames before it in the process's log",
        source: "CPython's traceback format",
        reported: Reported::WhenItFails,
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::signature::first_match;

    /// One line per signature, modelled on its cited source (the line as it reaches a log:
    /// with the engine's prefix where it adds one).
    pub(crate) const FIXTURES: &[(&str, &str)] = &[
        ("(EngineCore_DP0 pid=4121) ValueError: Free memory on device cuda:0 (31.20/79.19 GiB) on startup is less than desired GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.", "vllm-insufficient-free-memory"),
        ("ValueError: To serve at least one request with the model's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the available KV cache memory (9.41 GiB).", "vllm-kv-cache-too-small"),
        ("ValueError: The model's max seq len (4096) is larger than the maximum number of tokens that can be stored in KV cache (3664).", "vllm-kv-cache-too-small"),
        ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.", "vllm-no-kv-cache-memory"),
        ("[2026-08-22 10:03:11 TP0] RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.55", "sglang-not-enough-memory"),
        ("[2026-08-22 10:04:40 TP1] Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.50 GiB.", "sglang-cuda-graph-capture-failed"),
        ("RuntimeError: Page size mismatch: prefill server has page_size=64, but decode server has page_size=1. Both servers must use the same --page-size value.", "sglang-disagg-page-size-mismatch"),
        ("[2026-12-06 10:02:11 TP0] Prefill transfer failed for request rank=0 req.rid='9f2c' req.bootstrap_room=8812 with exception KVTransferError(bootstrap_room=8812): Failed to send kv chunk of 8812 to 10.0.0.3:41235", "sglang-kv-transfer-failed"),
        ("[2026-12-06 10:02:11 TP0] Decode transfer failed for request rank=0 decode_req.req.rid='9f2c' decode_req.req.bootstrap_room=8812 with exception KVTransferError(bootstrap_room=8812): Failed to get kvcache from prefill instance, it might be dead", "sglang-kv-transfer-failed"),
        ("[07/22/2025-05:45:38] [TRT-LLM] [E] Failed to initialize executor on rank 0: CUDA out of memory. Tried to allocate 136.00 MiB.", "trtllm-executor-init-failed"),
        ("[2026-08-22 10:01:02 TP3] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.11 GiB of which 1.06 GiB is free.", "cuda-oom"),
        ("RuntimeError: CUDA error: out of memory", "cuda-oom"),
        ("[2025-07-25 07:53:08 TP2] RuntimeError: CUDA error: an illegal memory access was encountered", "cuda-illegal-memory-access"),
        ("RuntimeError: CUDA error: no CUDA-capable device is detected", "cuda-no-device"),
        ("RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version", "cuda-driver-too-old"),
        ("[rank1]:[E1218 20:27:21.433063423 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000, Timeout(ms)=600000) ran for 600088 milliseconds before timing out.", "nccl-watchdog-timeout"),
        ("[rank3]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, remote process exited or there was a network error, NCCL version 2.27.3", "nccl-error"),
        ("ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.", "nccl-error"),
        ("torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 1/4 clients joined.", "torch-store-timeout"),
        ("[1756000000.123456] [node03:4242 :0]     ucp_context.c:1770 UCX  ERROR no usable transports/devices (asked tcp,rc on mlx5_9:1)", "ucx-no-usable-transports"),
        ("[1784273406.719079] [node17:994396:0]           gdaki.c:397  UCX  ERROR   gdaki channel chunk init: create_cq/qp failed (ch=2 ep=4)", "ucx-gdaki-init-failure"),
        ("E0717 07:30:06.719655  994396 nixl_agent.cpp:359] createBackend: backend 'UCX' encountered error during intra-agent transfer setup with status NIXL_ERR_BACKEND", "nixl-backend-init-failed"),
        ("nixl._bindings.nixlBackendError: NIXL_ERR_BACKEND", "nixl-backend-init-failed"),
        ("OSError: [Errno 98] Address already in use", "address-in-use"),
        ("2025-10-13T18:18:46.927697Z ERROR dynamo_llm::http::service::service_v2: Failed to bind server to address protocol=HTTP address=0.0.0.0:8000 error=Address already in use (os error 98)", "address-in-use"),
        ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 29700, code: -98, name: EADDRINUSE", "address-in-use"),
        ("OSError: [Errno 28] No space left on device: '/root/.cache/huggingface/hub/models--Qwen--Qwen3-8B/blobs/x.incomplete'", "disk-full"),
        ("zmq.error.ZMQError: Too many open files", "too-many-open-files"),
        ("Fatal Python error: Segmentation fault", "fatal-signal"),
        ("terminate called after throwing an instance of 'std::runtime_error'", "fatal-signal"),
        ("filelock._error.Timeout: The file lock '/hf/hub/.locks/models--Qwen--Qwen3-8B/3f1e.lock' could not be acquired.", "hf-filelock-timeout"),
        ("huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files in the disk cache and outgoing traffic has been disabled. To enable hf.co look-ups and downloads online, set 'local_files_only' to False.", "hf-offline-not-cached"),
        ("OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the cached files.", "hf-offline-not-cached"),
        ("Cannot access gated repo for url https://huggingface.co/api/models/meta-llama/Llama-3.1-8B-Instruct.", "hf-repo-not-found-or-gated"),
        ("Error: etcd startup connection timed out after 60 seconds", "dynamo-etcd-unreachable"),
        ("Error: NATS startup connection timed out after 60 seconds", "dynamo-nats-unreachable"),
        ("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': 1}", "vllm-engine-core-init-failed"),
        ("[2026-08-22 10:05:00 TP2] Scheduler hit an exception: Traceback (most recent call last):", "sglang-scheduler-exception"),
        ("Traceback (most recent call last):", "python-exception"),
    ];

    #[test]
    fn each_fixture_line_finds_its_signature_and_each_signature_has_one() {
        for (line, id) in FIXTURES {
            assert_eq!(
                first_match(SIGNATURES, line.as_bytes()).map(|s| s.id),
                Some(*id),
                "{line}"
            );
        }
        for s in SIGNATURES {
            assert!(
                FIXTURES.iter().any(|(_, id)| *id == s.id),
                "{} has no fixture line",
                s.id
            );
        }
    }

    #[test]
    fn lines_healthy_runs_print_are_no_failure() {
        for line in [
            // NCCL at a healthy start-up (src/include/checks.h SYSCHECK).
            "node1:123:456 [0] misc/socket.cc:484 NCCL WARN Call to bind failed: Address already in use",
            // Dynamo when etcd or NATS comes up a moment after it.
            "WARN dynamo_runtime::transports::etcd: etcd not reachable yet; retrying startup connection error=Unable to connect to etcd server at http://node01:2379. Check etcd server status",
            "WARN NATS not reachable yet; retrying startup connection",
            // Several ranks downloading one model.
            "Still waiting to acquire lock on /hf/hub/.locks/models--Qwen--Qwen3-8B/3f1e.lock (elapsed: 10.2 seconds)",
            // UCX warnings and a peer leaving.
            "[1784273406.684686] [node17:994396:0]  ucp_worker.c:1 UCX  WARN  failed to connect",
            "INFO 12:00:00 engine.py:1] Avg prompt throughput: 12.0 tokens/s",
        ] {
            assert_eq!(
                first_match(SIGNATURES, line.as_bytes()).map(|s| s.id),
                None,
                "{line}"
            );
        }
    }
}
