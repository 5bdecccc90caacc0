"""How often the tasks' determinism check accepts a program whose output is random (issue 50), and what the
check costs per proposal.

Each case is one code_o proposal whose output carries one bit of a given source of randomness: a fair random
bit (`random`), the order of a set of two strings (the hash seed), an address bit (taken when the module runs
and during the call), and the clock (a microsecond bit and a bit that flips every 2 s). Every case is
validated once in each of `--sandboxes` fresh `Sandbox(workers=2)`s, with inputs (or a salt) new for each
sandbox, and the acceptance rate is counted. The cases that import a module use a policy with the module
lists off (the default policy refuses `random`, `time`, `datetime`: the `policy` column), so they test the
check itself. `--before SRC` measures a second source tree (e.g. `git archive e72cec8 src | tar -x -C
/tmp/old` then `--before /tmp/old/src`) in the same run, in a subprocess of its own, interleaved with ours.

Cost: seconds per validated proposal on a warm sandbox (16 deterministic code_o proposals, and 8 code_f
proposals of 10 inputs, per call), alternating the trees call by call so both see the same load, and the
one-time start of the determinism pools (the first validation of a fresh sandbox).

    python bench/determinism.py [--sandboxes 30] [--before /tmp/old/src] [--out bench/results/determinism_acceptance.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "determinism_acceptance.json"

#: name -> (program with {k} for a per-sandbox salt, input text, uses a module the default policy refuses)
CASES: dict[str, tuple[str, str, bool]] = {
    "fair random bit (random.getrandbits)": (
        "import random\ndef f(x):\n    return random.getrandbits(1) + x + {k} * 0",
        "1",
        True,
    ),
    "set of two strings: list({a, b})": ("def f(a, b):\n    return list({{a, b}})", "'a{k}', 'b{k}'", False),
    "address bit at import: id(object()) >> 4 & 1": (
        "B = id(object()) >> 4 & 1\ndef f(x):\n    return B + x + {k} * 0",
        "1",
        False,
    ),
    "address bit at import, hashed: hash((id(object()), k)) & 1": (
        "B = hash((id(object()), {k})) & 1\ndef f(x):\n    return B + x",
        "1",
        False,
    ),
    "address bit in the call: id(object()) >> 4 & 1": (
        "def f(x):\n    return (id(object()) >> 4 & 1) + x + {k} * 0",
        "1",
        False,
    ),
    "clock bit, 1 us: time.time_ns() // 1000 & 1": (
        "import time\ndef f(x):\n    return (time.time_ns() // 1000 & 1) + x + {k} * 0",
        "1",
        True,
    ),
    "clock bit, 2 s: int(time.time() / 2) & 1": (
        "import time\ndef f(x):\n    return (int(time.time() / 2) & 1) + x + {k} * 0",
        "1",
        True,
    ),
}

CODE_O = [
    f"def f(a, b):\n    return sorted({{a, b, {j}}}), {{'k': [a] * {j % 3}}}, a * {j}" for j in range(16)
]
CODE_F = ["def f(x):\n    return [x * 2, str(x) + 'z', {'s': x % 7}]"] * 8


def _policy(lax: bool):
    from populora.tasks.policy import DEFAULT_POLICY, CapabilityPolicy

    return CapabilityPolicy(deny_modules=frozenset(), allow_modules=None) if lax else DEFAULT_POLICY


def measure_acceptance(sandboxes: int) -> dict:
    """Per case: how many of `sandboxes` fresh sandboxes accepted it, and whether the default policy refuses
    it before any sandbox runs it."""
    from populora import tasks as T
    from populora.sandbox import Sandbox
    from populora.tasks.policy import parse_program
    from populora.tasks.types import Invalid, Proposal

    accepted = dict.fromkeys(CASES, 0)
    answers: dict[str, list[str]] = {c: [] for c in CASES}  # the outputs of the accepted ones
    reasons: dict[str, dict[str, int]] = {c: {} for c in CASES}
    for n in range(sandboxes):
        with Sandbox(workers=2) as sb:
            for case, (prog, inp, lax) in CASES.items():
                t = T.get("code_o", policy=_policy(lax))
                (res,) = t.validate([Proposal(prog.format(k=n), (inp.format(k=n),))], sb)
                if isinstance(res, Invalid):
                    why = res.reason.split(":")[-1].split("(")[0].strip()
                    reasons[case][why] = reasons[case].get(why, 0) + 1
                else:
                    accepted[case] += 1
                    answers[case].append(res.outputs[0])
    policy = {}
    for case, (prog, _, _) in CASES.items():
        _, why = parse_program(prog.format(k=0), _policy(False), require_params=True)
        policy[case] = why or "allowed"
    return {
        "sandboxes": sandboxes,
        "accepted": accepted,
        # An accepted case whose answers are all one value answered identically in every sandbox (every worker
        # and every determinism pool of each): its output is then a property of the program, not the process.
        "distinct_accepted_answers": {c: sorted(set(a)) for c, a in answers.items()},
        "rejected_as": reasons,
        "default_policy": policy,
    }


def _proposals():
    from populora.tasks.types import Proposal

    code_o = [Proposal(p, (f"{j}, {j + 1}",)) for j, p in enumerate(CODE_O)]
    code_f = [Proposal(p, tuple(str(i) for i in range(10)), message="double it") for p in CODE_F]
    return code_o, code_f


def serve_cost() -> None:
    """A cost server: reads a line per timed call ("code_o" / "code_f") and answers seconds per proposal."""
    from populora import tasks as T
    from populora.sandbox import Sandbox
    from populora.tasks.types import Problem

    code_o, code_f = _proposals()
    with Sandbox(workers=2) as sb:
        t0 = time.perf_counter()
        res = T.get("code_o").validate(code_o[:1], sb)
        first = time.perf_counter() - t0
        assert isinstance(res[0], Problem), res
        print(json.dumps({"first_validation_s": first}), flush=True)
        for line in sys.stdin:
            task = line.strip()
            props = code_o if task == "code_o" else code_f
            t = T.get(task)
            t0 = time.perf_counter()
            res = t.validate(props, sb)
            took = time.perf_counter() - t0
            assert all(isinstance(r, Problem) for r in res), res
            print(json.dumps({"s_per_proposal": took / len(props)}), flush=True)


def _spawn(src: str | None, *args: str, **kw) -> subprocess.Popen:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen([sys.executable, __file__, *args], env=env, text=True, cwd=str(ROOT), **kw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sandboxes", type=int, default=30, help="fresh sandboxes per case (default 30)")
    ap.add_argument("--calls", type=int, default=6, help="timed validate calls per task and tree (default 6)")
    ap.add_argument("--before", default=None, help="a second source tree's src/ folder, measured alike")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--acceptance-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cost-server", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if not 1 <= a.sandboxes <= 1000 or not 1 <= a.calls <= 100:
        ap.error("--sandboxes takes 1 to 1000 and --calls 1 to 100")
    if a.before is not None and not (Path(a.before) / "populora" / "sandbox" / "pool.py").is_file():
        ap.error(f"--before {a.before}: not a populora src/ folder (no populora/sandbox/pool.py in it)")
    if a.cost_server:
        return serve_cost()
    if a.acceptance_only:
        print(json.dumps(measure_acceptance(a.sandboxes)))
        return None
    trees = {"now": None, **({"before": a.before} if a.before else {})}
    result: dict = {
        "command": "python bench/determinism.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_before": os.getloadavg(),
    }
    # Cost first (short, interleaved call by call), then acceptance (long, one tree after the other).
    servers = {
        name: _spawn(src, "--cost-server", stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        for name, src in trees.items()
    }
    cost: dict = {
        name: {"first_validation_s": json.loads(p.stdout.readline())["first_validation_s"]}
        for name, p in servers.items()
    }
    for task in ("code_o", "code_f"):
        samples: dict[str, list[float]] = {name: [] for name in trees}
        for _ in range(a.calls):
            for name, p in servers.items():
                p.stdin.write(task + "\n")
                p.stdin.flush()
                samples[name].append(json.loads(p.stdout.readline())["s_per_proposal"])
        for name in trees:
            xs = sorted(samples[name])
            cost[name][f"{task}_s_per_proposal_median"] = xs[len(xs) // 2]
            cost[name][f"{task}_s_per_proposal_all"] = [round(x, 5) for x in samples[name]]
    for p in servers.values():
        p.stdin.close()
        p.wait()
    result["cost"] = cost
    accept = {}
    for name, src in trees.items():
        p = _spawn(src, "--acceptance-only", "--sandboxes", str(a.sandboxes), stdout=subprocess.PIPE)
        out, _ = p.communicate()
        accept[name] = json.loads(out)
    result["acceptance"] = accept
    result["load_after"] = os.getloadavg()
    _table(result, trees)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {a.out}")
    return None


def _table(result: dict, trees: dict) -> None:
    names = list(trees)
    n = result["acceptance"][names[0]]["sandboxes"]
    print(f"accepted, of {n} fresh sandboxes each: " + " | ".join(names) + " | default policy")
    for case in CASES:
        cells = []
        for name in names:
            acc = result["acceptance"][name]
            distinct = len(acc["distinct_accepted_answers"][case])
            cells.append(f"{acc['accepted'][case]}" + (f" ({distinct} answer(s))" if distinct else ""))
        print(
            f"  {case:62s} "
            + " | ".join(cells)
            + f" | {result['acceptance'][names[0]]['default_policy'][case]}"
        )
    for name in names:
        c = result["cost"][name]
        print(
            f"cost ({name}): code_o {c['code_o_s_per_proposal_median'] * 1000:.1f} ms/proposal, code_f "
            f"{c['code_f_s_per_proposal_median'] * 1000:.1f} ms/proposal, first validation of a fresh sandbox "
            f"{c['first_validation_s']:.2f} s"
        )


if __name__ == "__main__":
    main()
