#!/usr/bin/env python3
"""The engine's layering, checked on the source tree (CTest: engine_layers).

Dependencies run one way: core → model → backend → cpu, cuda → runtime, with the CUDA module
(cuda/backend, cuda/selftest) on top. A file may include headers of its own folder and of the
folders before it, never of one after it; cpu/ and cuda/ are peers and include nothing of each
other. The model formats, the runtime and core include nothing from kernels/; kernels/ includes
nothing of the engine but the header-only engine/core/scale_layout.h and engine/core/sampling.h
(the draw the sampling kernel and the engine share); ui/ includes no engine or
kernels header. Prints every violation as file:line and exits 1 when there is one.
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
RANK = {"core": 0, "model": 1, "backend": 2, "cpu": 3, "cuda": 3, "runtime": 4, "cuda/backend": 5, "cuda/selftest": 5}
PEERS = [{"cpu", "cuda"}]
NO_KERNELS = {"core", "model", "backend", "runtime"}
KERNEL_VISIBLE = {"engine/core/scale_layout.h", "engine/core/sampling.h"}  # header-only, engine-free
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(rel):  # "engine/cuda/backend/x.cpp" -> "cuda/backend"
    parts = rel.split("/")[1:-1]
    if parts[:2] in (["cuda", "backend"], ["cuda", "selftest"]):
        return "/".join(parts[:2])
    return parts[0] if parts else None


def sources(top):
    for base, _, files in os.walk(os.path.join(ROOT, top)):
        for f in files:
            if f.endswith((".h", ".cpp", ".cu", ".cuh")):
                path = os.path.join(base, f)
                yield os.path.relpath(path, ROOT).replace(os.sep, "/"), path


def main():
    bad = []
    for rel, path in sources("engine"):
        own = layer_of(rel)
        if own is None:
            bad.append(f"{rel}: a source file at engine/'s top level belongs in a layer")
            continue
        for n, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            inc = m.group(1)
            if inc.startswith("engine/"):
                dep = layer_of(inc)
                if dep not in RANK:
                    bad.append(f"{rel}:{n}: includes {inc}, which is in no layer")
                elif dep != own and (RANK[dep] > RANK[own] or {dep, own} in PEERS or
                                     (own == "runtime" and dep.startswith("cuda/"))):
                    bad.append(f"{rel}:{n}: {own}/ includes {inc} ({dep}/ is not below it)")
            elif inc.startswith("kernels/") and own in NO_KERNELS:
                bad.append(f"{rel}:{n}: {own}/ includes {inc} (only the backends may use kernels/)")
            elif inc.startswith(("app/", "ui/")):
                bad.append(f"{rel}:{n}: the engine includes {inc}")
    for rel, path in sources("kernels"):
        for n, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
            m = INCLUDE.match(line)
            if m and m.group(1).startswith("engine/") and m.group(1) not in KERNEL_VISIBLE:
                bad.append(f"{rel}:{n}: kernels/ includes {m.group(1)}")
    for rel, path in sources("ui"):
        for n, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
            m = INCLUDE.match(line)
            if m and m.group(1).startswith(("engine/", "kernels/")) and not rel.startswith("ui/desktop/"):
                bad.append(f"{rel}:{n}: ui/ includes {m.group(1)} (widgets see app/'s value types only)")
    top = [f for f in os.listdir(os.path.join(ROOT, "engine"))]
    if len(top) > 12:
        bad.append(f"engine/ holds {len(top)} entries at its top level (at most 12)")
    for b in bad:
        print(b)
    print(f"engine layers: {len(bad)} violation(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
