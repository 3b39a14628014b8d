#!/usr/bin/env python3
"""Fails when a source file includes a layer above its own (docs/architecture.md, "Layers").

Layers, lowest first: common < daemon < storage < placement < fs < cli. A file may include its
own layer and those below it. Inside fs/, the two processes' folders stay apart: fs/protocol/
includes neither fs/namespace/ nor fs/mount/, and those two never include each other; the
client side (fs/protocol/, fs/mount/) includes no placement/ or storage/ either (fs/README.md).
bench/, tests/ and examples/ sit above every layer.

  scripts/check_includes.py [ROOT]     (exit 1 and one line per violation)
  scripts/check_includes.py --self-test (a tree with one of each violation must fail on both)
"""
import os
import re
import sys

LAYERS = ["common", "daemon", "storage", "placement", "fs", "cli"]
# Folders inside a layer that must not include each other's code: (folder, what it may not include).
APART = [("fs/protocol/", ("fs/namespace/", "fs/mount/", "placement/", "storage/")),
         ("fs/namespace/", ("fs/mount/",)),
         ("fs/mount/", ("fs/namespace/", "placement/", "storage/"))]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def violations(root):
    for layer in LAYERS:
        rank = LAYERS.index(layer)
        for dirpath, _, files in os.walk(os.path.join(root, layer)):
            for name in sorted(files):
                if not name.endswith((".h", ".cc", ".c", ".cpp")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = m.group(1)
                        top = target.split("/", 1)[0]
                        if top in LAYERS and LAYERS.index(top) > rank:
                            yield f"{rel}:{lineno}: {layer}/ includes {target} (layer {top} is above {layer})"
                        for folder, banned in APART:
                            if rel.startswith(folder) and target.startswith(banned):
                                yield (f"{rel}:{lineno}: {folder} includes {target} "
                                       f"(not allowed in {folder}: fs/README.md says what each fs/ folder may include)")


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        files = {"common/ok.h": '#include "common/status.h"\n',
                 "storage/up.cc": '#include <vector>\n#include "placement/cte.h"\n',
                 "fs/mount/apart.cc": '#include "fs/protocol/fs_protocol.h"\n#include "fs/namespace/namespace.h"\n'
                                      '#include "daemon/ipc.h"\n#include "placement/cte.h"\n',
                 "cli/top.cc": '#include "fs/mount/fuse_session.h"\n#include "fs/namespace/fs_pool.h"\n'}
        for rel, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        got = list(violations(root))
    want = ["storage/up.cc:2:", "fs/mount/apart.cc:2:", "fs/mount/apart.cc:4:"]
    ok = len(got) == len(want) and all(any(v.startswith(w) for v in got) for w in want)
    print("\n".join(got))
    print("check_includes self-test:", "ok" if ok else f"FAILED: expected exactly {want}")
    return 0 if ok else 1


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    bad = list(violations(root))
    for v in bad:
        print(v)
    if bad:
        print(f"check_includes: {len(bad)} include(s) point up a layer; see docs/architecture.md", file=sys.stderr)
        return 1
    print("check_includes: every include points down or across its own layer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
