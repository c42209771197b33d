#!/usr/bin/env python3
"""Fetch the Mooncake client loaders of vLLM and SGLang, pinned, for the test suite.

mcsup writes a config file (vLLM: MOONCAKE_CONFIG_PATH) and environment variables (SGLang:
MOONCAKE_MASTER, MOONCAKE_GLOBAL_SEGMENT_SIZE, ...) that the inference engines read with their
own code. tests/client_loaders.rs loads exactly that code: these source files, taken unchanged
from the published release artifacts on PyPI, verified by sha256.

Neither package can be installed here (vLLM's wheel is 336 MB and needs CUDA torch; SGLang pulls
in torch too), and only these parser modules are needed, so only they are extracted:

  <dest>/vllm/vllm/distributed/mooncake_store.py                       (stdlib + `regex`)
  <dest>/sglang/sglang/srt/environ.py                                 (stdlib only)
  <dest>/sglang/sglang/srt/mem_cache/storage/mooncake_store/mooncake_store.py
                                                                      (torch etc. stubbed by the test)

Usage: client_sources.py DEST        (idempotent: a complete DEST with a matching STAMP is kept)
"""

import hashlib
import io
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.request
import zipfile

FILES = "https://files.pythonhosted.org/packages"

# (name, version, url, sha256, archive kind, {member in archive: path under DEST/<name>})
ARTIFACTS = [
    (
        "vllm",
        "0.33.0",
        f"{FILES}/f7/25/aa5684e9c59d6fc75f78926b7f15e8d9adc7de2d9e6e7575b80776ad8169/vllm-0.33.0.tar.gz",
        "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112",
        "tar.gz",
        {
            "vllm-0.33.0/vllm/distributed/mooncake_store.py": "vllm/distributed/mooncake_store.py",
            # Where the KV store worker reads the address it registers as.
            "vllm-0.33.0/vllm/envs.py": "vllm/envs.py",
            "vllm-0.33.0/vllm/distributed/kv_transfer/kv_connector/v1/mooncake/rdma_utils.py":
                "vllm/distributed/kv_transfer/kv_connector/v1/mooncake/rdma_utils.py",
        },
    ),
    (
        "sglang",
        "0.5.23",
        f"{FILES}/57/dd/0206d00b2ea5b163bbdd216e91cc4f23ea90fde8620db0a6272d4236b68e/"
        "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
        "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937",
        "zip",
        {
            "sglang/srt/environ.py": "sglang/srt/environ.py",
            "sglang/srt/mem_cache/storage/mooncake_store/mooncake_store.py":
                "sglang/srt/mem_cache/storage/mooncake_store/mooncake_store.py",
        },
    ),
]


def stamp() -> str:
    # The members too: adding a file to the list must fetch again.
    return "\n".join(f"{n}=={v} {h} {sorted(m.values())}" for n, v, _, h, _, m in ARTIFACTS) + "\n"


def fetch(url: str, sha256: str) -> bytes:
    with urllib.request.urlopen(url, timeout=300) as r:
        data = r.read()
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        sys.exit(f"client_sources: {url}: sha256 {got}, expected {sha256}")
    return data


def extract(data: bytes, kind: str, members: dict, into: str) -> None:
    def put(member: str, blob: bytes) -> None:
        out = os.path.join(into, members[member])
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "wb") as f:
            f.write(blob)

    wanted = set(members)
    if kind == "zip":
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            for m in members:
                put(m, z.read(m))
                wanted.discard(m)
    else:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as t:
            for info in t:
                if info.name in wanted:
                    put(info.name, t.extractfile(info).read())
                    wanted.discard(info.name)
    if wanted:
        sys.exit(f"client_sources: not in the archive: {sorted(wanted)}")


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    dest = sys.argv[1]
    stamp_path = os.path.join(dest, "STAMP")
    if os.path.exists(stamp_path) and open(stamp_path).read() == stamp():
        print(f"client_sources: {dest} up to date")
        return
    parent = os.path.dirname(os.path.abspath(dest))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".client-sources.", dir=parent)
    try:
        for name, version, url, sha, kind, members in ARTIFACTS:
            print(f"client_sources: {name}=={version} from {url.rsplit('/', 1)[1]}")
            extract(fetch(url, sha), kind, members, os.path.join(tmp, name))
        with open(os.path.join(tmp, "STAMP"), "w") as f:
            f.write(stamp())
        shutil.rmtree(dest, ignore_errors=True)
        os.rename(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
