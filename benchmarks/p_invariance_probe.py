"""Which ops round a member's numbers differently when the population is larger? (issue 12)

The arms invariant needs every op of the training iteration to compute member p's numbers the
same way at P = arms x S as at P = S. This probe runs one eager iteration at P = 4 x S under a
TorchDispatchMode that, after every aten / custom op whose tensors are member-first (leading
dim a multiple of P), re-runs the op on the first quarter of those tensors (arm 0's members,
i.e. the shapes of a run of that arm alone) and compares the bits with the first quarter of
the full op's output. An op that differs chooses its algorithm (blocks per output, split-K)
from the batch count. Backward ops are seen too (autograd's device threads inherit the mode).

    python benchmarks/p_invariance_probe.py [--arms 4] [--population 4] [--device cuda]

Prints one row per op name that differed (count, shapes, max |diff|), then an end-to-end
check: the state after one eager iteration, arms together against each arm alone.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_unflatten

SKIP = ("empty", "new_empty", "empty_like", "empty_strided", "set_", "resize_", "_local_scalar_dense")


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return bool((a == b).all())


class SliceProbe(TorchDispatchMode):
    def __init__(self, P: int, arms: int):
        super().__init__()
        self.P, self.arms = P, arms
        self.checked: dict[str, int] = defaultdict(int)
        self.diffs: dict[str, list] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)

    def _member_first(self, t) -> bool:
        return isinstance(t, torch.Tensor) and t.dim() > 0 and t.shape[0] >= self.P and t.shape[0] % self.P == 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = str(func.overloadpacket.__name__) if hasattr(func, "overloadpacket") else str(func)
        if any(name == s or name.startswith(s) for s in SKIP):
            return out
        flat, spec = tree_flatten((args, kwargs))
        if not any(self._member_first(t) for t in flat):
            return out
        outs = [o for o in tree_flatten(out)[0] if self._member_first(o)]
        if not outs:
            return out
        try:
            sliced = [
                (t[: t.shape[0] // self.arms].clone() if self._member_first(t) else t.clone()) if isinstance(t, torch.Tensor) else t
                for t in flat
            ]
            a2, k2 = tree_unflatten(sliced, spec)
            small = [o for o in tree_flatten(func(*a2, **k2))[0] if isinstance(o, torch.Tensor)]
        except Exception:  # an op whose other arguments encode P (a view's sizes): not comparable
            self.errors[name] += 1
            return out
        full = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        for f, s in zip(full, small):
            if not self._member_first(f):
                continue
            q = f[: f.shape[0] // self.arms]
            if q.shape != s.shape:
                continue
            self.checked[str(func)] += 1
            if not _bits_equal(q, s):
                d = (q.double() - s.double()).abs().nan_to_num(nan=float("inf")).max().item() if q.is_floating_point() else "int"
                shapes = [tuple(t.shape) for t in flat if isinstance(t, torch.Tensor)]
                self.diffs[str(func)].append((shapes, d))
        return out


def _learner(cfg, arms):
    from tune_gems.ops import resolve_backend
    from tune_gems.trainer.run_setup import prepare_market
    from tune_gems.trainer.learner import Learner

    dev = torch.device(cfg.device)
    market = prepare_market(cfg, dev, n_seed_indices=cfg.trainer.population)
    learner = Learner(cfg, market, dev, resolve_backend(cfg.kernels, dev), arms=arms)
    learner.reset_envs()
    for _ in range(cfg.trainer.learning_starts // cfg.trainer.n_envs):
        learner.collect()
    return learner


def main() -> None:
    from tune_gems.design.arms import ArmsConfig, expand_arms
    from tune_gems.config.load import load_config

    ap = argparse.ArgumentParser()
    ap.add_argument("--arms", type=int, default=4)
    ap.add_argument("--population", type=int, default=4)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    kernels = "cuda" if args.device == "cuda" else "reference"
    base = load_config(None, [
        f"device={args.device}", f"kernels={kernels}", f"trainer.population={args.population}", "trainer.batch_size=64",
        "trainer.n_envs=8", "trainer.replay_capacity=4096", "trainer.learning_starts=256", "trainer.target_update=16",
        "data.synthetic.n=2000", "gems.g10.mode=wire", "gems.g12.mode=wire",
    ])  # fmt: skip
    arm = {"gems.g10.mode": "wire", "gems.g12.mode": "wire"}
    arms = expand_arms(base, ArmsConfig.model_validate({"list": [{"name": f"a{i}", **arm} for i in range(args.arms)]}))
    P = args.arms * args.population
    report = {}
    for label, arm_list in (("one arm of P members (no member blocks)", None), ("arms (member blocks)", arms)):
        if arm_list is None:
            cfg = load_config(None, [f"device={args.device}", f"kernels={kernels}", f"trainer.population={P}", "trainer.batch_size=64",
                                     "trainer.n_envs=8", "trainer.replay_capacity=4096", "trainer.learning_starts=256",
                                     "trainer.target_update=16", "data.synthetic.n=2000", "gems.g10.mode=wire", "gems.g12.mode=wire"])  # fmt: skip
        else:
            cfg = base
        learner = _learner(cfg, arm_list)
        probe = SliceProbe(P, args.arms)
        with probe:
            learner.iteration()
        if args.device == "cuda":
            torch.cuda.synchronize()
        print(f"\n== {label}: P = {P}; ops checked {sum(probe.checked.values())} ({len(probe.checked)} kinds)")
        print(f"{'op':55s} {'checked':>7s} {'differ':>6s} {'max|diff|':>10s}  shapes")
        rows = []
        for op, lst in sorted(probe.diffs.items(), key=lambda kv: -len(kv[1])):
            md = max((d for _, d in lst if d != "int"), default=0.0)
            print(f"{op:55s} {probe.checked[op]:7d} {len(lst):6d} {md:10.3g}  {lst[0][0]}")
            rows.append({"op": op, "checked": probe.checked[op], "differ": len(lst), "max_diff": md, "shapes": str(lst[0][0])})
        if not rows:
            print("(none differ)")
        report[label] = rows

    # end to end, eager: the arms run against arm 0 alone after one iteration
    together = _learner(base, arms)
    alone = _learner(arms[0].config, None)
    together.iteration()
    alone.iteration()
    S = args.population
    bad = []
    for k, t in together.state_tensors().items():
        a = alone.state_tensors()[k]
        if t.dim() == 0 or k.endswith(".support"):
            continue
        if k == "metrics.acc":
            x, y = t[:, :S], a
        else:
            x, y = t.reshape(P, -1)[:S], a.reshape(S, -1)
        if not _bits_equal(x, y):
            d = (x.double() - y.double()).abs().nan_to_num(nan=float("inf")).max().item() if x.is_floating_point() else "int"
            bad.append(f"{k} max|diff|={d}")
    print(f"\n== end to end (eager, one iteration): arm 0 of {args.arms} arms vs alone: {len(bad)} state tensors differ")
    for b in bad[:20]:
        print("  ", b)
    report["end_to_end_differ"] = bad
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
