#!/usr/bin/env python3
"""Run the real Mooncake client parsers of vLLM and SGLang on what mcsup wrote.

The parser modules are the release files fetched by scripts/lib/client_sources.py into
<venv>/client-sources (vLLM 0.33.0 `vllm/distributed/mooncake_store.py`, SGLang 0.5.23
`sglang/srt/mem_cache/storage/mooncake_store/mooncake_store.py` + `sglang/srt/environ.py`).
They are loaded by file path, unchanged:

* vLLM's module imports only the standard library and `regex` (installed by setup), so nothing is
  stubbed; loading it by path skips `vllm/__init__`, which would import torch.
* SGLang's module imports torch and SGLang's cache/pool classes at import time for its store
  class. Those names are stubbed with empty classes (never called: only the config dataclass and
  its loaders run); `sglang.srt.environ`, which the loaders read every value through, is the real
  file.

Usage (the environment is the worker's; results are JSON on stdout, a loader error is
"<ExceptionType>: <message>" on stderr with exit status 1):
  client_loaders.py SOURCES vllm-config     vLLM MooncakeStoreConfig.load_from_config()
  client_loaders.py SOURCES vllm-requester IP   vLLM rdma_utils.get_requester_local_hostname(IP):
                                            the address vLLM's KV store worker registers as
                                            (IP stands for what vLLM's get_ip() found)
  client_loaders.py SOURCES sglang-env      SGLang MooncakeStoreConfig.load_from_env()
  client_loaders.py SOURCES sglang-sizes    one JSON string per stdin line -> bytes or null
"""
import dataclasses
import importlib.util
import json
import os
import sys
import types


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


class Stub(types.ModuleType):
    """A module whose every attribute is an (empty) class: enough to subclass and annotate."""

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        cls = type(attr, (), {})
        setattr(self, attr, cls)
        return cls


def package(name):
    mod = types.ModuleType(name)
    mod.__path__ = []
    sys.modules[name] = mod
    return mod


def vllm(sources):
    return load("vllm_mooncake_store", os.path.join(sources, "vllm/vllm/distributed/mooncake_store.py"))


def vllm_rdma_utils(sources):
    """vLLM's `rdma_utils` with the real `vllm.envs` (standard library only); `vllm.logger` is a
    plain logging shim (it only names the module's logger)."""
    root = os.path.join(sources, "vllm/vllm")
    for name in ["vllm", "vllm.distributed", "vllm.distributed.kv_transfer",
                 "vllm.distributed.kv_transfer.kv_connector",
                 "vllm.distributed.kv_transfer.kv_connector.v1",
                 "vllm.distributed.kv_transfer.kv_connector.v1.mooncake"]:
        package(name)
    logger = types.ModuleType("vllm.logger")
    import logging
    logger.init_logger = logging.getLogger
    sys.modules["vllm.logger"] = logger
    sys.modules["vllm"].envs = load("vllm.envs", os.path.join(root, "envs.py"))
    return load("vllm.distributed.kv_transfer.kv_connector.v1.mooncake.rdma_utils",
                os.path.join(root, "distributed/kv_transfer/kv_connector/v1/mooncake/rdma_utils.py"))


def sglang(sources):
    root = os.path.join(sources, "sglang")
    for name in ["sglang", "sglang.srt", "sglang.srt.mem_cache", "sglang.srt.mem_cache.hybrid_cache",
                 "sglang.srt.observability"]:
        package(name)
    for name in ["torch", "sglang.srt.mem_cache.hicache_storage",
                 "sglang.srt.mem_cache.hybrid_cache.linker_pool_assembler",
                 "sglang.srt.mem_cache.pool_host", "sglang.srt.mem_cache.pool_host.mla",
                 "sglang.srt.observability.metrics_collector"]:
        sys.modules[name] = Stub(name)
    sys.modules["sglang.srt.mem_cache.pool_host"].__path__ = []
    load("sglang.srt.environ", os.path.join(root, "sglang/srt/environ.py"))
    return load("sglang_mooncake_store",
                os.path.join(root, "sglang/srt/mem_cache/storage/mooncake_store/mooncake_store.py"))


def main():
    sources, what = sys.argv[1], sys.argv[2]
    try:
        if what == "vllm-config":
            out = dataclasses.asdict(vllm(sources).MooncakeStoreConfig.load_from_config())
        elif what == "vllm-requester":
            out = vllm_rdma_utils(sources).get_requester_local_hostname(sys.argv[3])
        elif what == "sglang-env":
            out = dataclasses.asdict(sglang(sources).MooncakeStoreConfig.load_from_env())
        elif what == "sglang-sizes":
            parse = sglang(sources)._parse_global_segment_size
            out = []
            for line in sys.stdin:
                try:
                    out.append(parse(json.loads(line)))
                except ValueError:
                    out.append(None)
        else:
            sys.exit(f"unknown command {what!r}")
    except Exception as e:  # the loader's refusal is the answer
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
