#!/usr/bin/env python3
"""bash completion of clioctl and clio_run (etc/bash-completion/clioctl): subcommands at each
level, options, `tier add` keys, and tier names taken from a running runtime (none, and no
error output, when it is not running).

    python3 tests/integration/completion_test.py --build-dir build
"""

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_test import Env, TestFailure, check, log  # noqa: E402

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(SRC, "etc", "bash-completion", "clioctl")


def complete(env, words, function="_clioctl"):
    """What bash offers for the last of `words` (the word being typed)."""
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    script = (f"source '{SCRIPT}'; COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; {function}; "
              'printf "%s\\n" "${COMPREPLY[@]}"')
    e = env.env()
    e["PATH"] = os.path.join(env.build_dir, "cli") + os.pathsep + e.get("PATH", "")
    cp = subprocess.run(["bash", "--norc", "-c", script], env=e, capture_output=True, text=True, timeout=60)
    check(cp.returncode == 0 and cp.stderr == "", f"completion of {words} failed: {cp.stderr}")
    return [l for l in cp.stdout.splitlines() if l]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    args = ap.parse_args()
    build = os.path.abspath(args.build_dir)
    os.chdir("/")  # never hold a mount busy through our cwd
    env = Env(build, "completion")
    ok = False
    try:
        env.write_config()
        cases = [
            (["clioctl", ""], ["stat", "flush", "locate", "tier", "pool", "compose", "array"]),
            (["clioctl", "locate", "--"], ["--json", "--help", "--pool"]),
            (["clioctl", "flush", "/et"], ["/etc"]),
            (["clioctl", "pool", ""], ["list", "create", "destroy"]),
            (["clioctl", "pool", "create", "clio_s"], ["clio_safe_bdev"]),
            (["clioctl", "pool", "create", "--"], ["--json", "--help", "--id", "--restart"]),
            (["clioctl", "compose", ""], ["start", "stop"]),
            (["clioctl", "compose", "start", "/et"], ["/etc"]),
            (["clioctl", "ti"], ["tier"]),
            (["clioctl", "--json", "tier", ""], ["list", "stat", "lifespan", "drain", "undrain", "add", "rm"]),
            (["clioctl", "tier", "lifespan", ""], ["get", "set"]),
            (["clioctl", "array", "re"], ["remove", "recover"]),
            (["clioctl", "tier", "add", "/x", "capa"], ["capacity_limit="]),
            (["clioctl", "tier", "stat", "--j"], ["--json"]),
        ]
        for words, want in cases:
            got = complete(env, words)
            check(got == want, f"completion of {words}: {got}, expected {want}")
        check(complete(env, ["clio_run", "st"], "_clio_run") == ["start", "stop", "status"], "clio_run st")
        check(complete(env, ["clio_run", "compose", ""], "_clio_run") == ["start", "stop"], "clio_run compose")
        check(complete(env, ["clio_run", "start", "--f"], "_clio_run") == ["--foreground", "--fresh"],
              "clio_run start --f")
        check(complete(env, ["clio_run", "start", "--mount", "/mnt/clio", "-o", "al"], "_clio_run") == ["allow_other"],
              "clio_run start --mount DIR -o al")
        # No runtime: no tier names, and nothing on stderr.
        check(complete(env, ["clioctl", "tier", "drain", ""]) == [], "tier names without a runtime")
        env.start_runtime()
        names = complete(env, ["clioctl", "tier", "drain", ""])
        tiers = [t["name"] for t in env.tier_stat()]
        check(sorted(names) == sorted(tiers), f"tier names offered {names}, tier stat says {tiers}")
        pools = complete(env, ["clioctl", "pool", "destroy", ""])
        check(sorted(pools) == ["clio_cte_core", "clio_fs"], f"pool names offered {pools}")
        prefix = tiers[0][:6]
        check(all(n.startswith(prefix) for n in complete(env, ["clioctl", "tier", "lifespan", "set", prefix])),
              "tier names do not follow the typed prefix")
        env.stop_runtime()
        ok = True
        log("completion: subcommands, options, tier add keys, live tier and pool names")
    except TestFailure as e:
        log(f"FAIL: {e}")
    finally:
        for err in env.cleanup():
            log(f"cleanup problem: {err}")
    log("PASS completion" if ok else "FAIL completion")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
