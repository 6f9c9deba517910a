#!/usr/bin/python3
"""The PyTorch reference translator (../shared/bench/torch_translate_ref.py) trained with
the learning-rate schedule that `translate train --schedule cosine` uses: a linear warmup
to --lr over --warmup steps, then half a cosine down to --min-lr at step --decay-steps,
constant afterwards. Everything else (data, model, initialisation, Adam, batches,
evaluation, what it reports) is the reference's own: this script only replaces the
schedule it builds, and passes every other argument on.

    /usr/bin/python3 bench/torch_translate_cosine.py [--lr 3e-3] [--warmup 150] [--decay-steps 700]
        [--min-lr X] [reference arguments: --eval-every --stop-acc --threads --json ...]

The reference script is found at $TORCH_REF_BASE, else ../shared/bench/ beside the repository.
"""
import argparse
import importlib.util
import math
import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
base = os.environ.get("TORCH_REF_BASE", os.path.join(here, "..", "..", "shared", "bench", "torch_translate_ref.py"))

# this script's options, with translate train's defaults; the rest go to the reference
ours = argparse.ArgumentParser(
    description="The PyTorch reference translator with translate train's cosine schedule. Options not listed "
    "here go to the reference script (" + base + "): --threads, --train, --valid, --eval-every, --stop-acc, "
    "--target-acc, --max-steps, --json, ...",
    add_help=True)
ours.add_argument("--lr", type=float, default=3e-3, help="the peak rate, reached after --warmup steps")
ours.add_argument("--warmup", type=int, default=150, help="warmup steps")
ours.add_argument("--decay-steps", type=int, default=700, help="the step at which the rate reaches --min-lr")
ours.add_argument("--min-lr", type=float, default=None, help="the final rate (default: --lr / 20)")
args, rest = ours.parse_known_args()
peak = args.lr
floor = peak / 20 if args.min_lr is None else args.min_lr
if not (math.isfinite(peak) and peak > 0):
    ours.error(f"--lr must be positive and finite, got {peak}")
if args.warmup < 1:
    ours.error(f"--warmup must be at least 1, got {args.warmup}")
if args.decay_steps <= args.warmup:
    ours.error(f"--decay-steps ({args.decay_steps}) must be larger than --warmup ({args.warmup})")
if not (math.isfinite(floor) and 0 <= floor <= peak):
    ours.error(f"--min-lr must be in [0, --lr = {peak}], got {floor}")
if not os.path.isfile(base):
    ours.error(f"no PyTorch reference at {base} (set TORCH_REF_BASE)")


def lr_at(step):
    """ember's WarmupCosineSchedule: step counts from 1."""
    if step <= args.warmup:
        return peak * step / args.warmup
    if step >= args.decay_steps:
        return floor
    t = (step - args.warmup) / (args.decay_steps - args.warmup)
    return floor + (peak - floor) * 0.5 * (1 + math.cos(math.pi * t))


spec = importlib.util.spec_from_file_location("torch_translate_ref", base)
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)


# The reference builds torch.optim.lr_scheduler.LambdaLR(opt, f), f(s) scaling its --lr
# and s counting the scheduler's steps from 0: f(s) is the factor for the (s+1)-th
# optimizer step. Its `torch` is replaced by one whose LambdaLR takes this schedule.
class _Schedulers:
    @staticmethod
    def LambdaLR(opt, _reference_schedule):
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_at(s + 1) / peak)


class _Optim:
    def __getattr__(self, name):
        return _Schedulers if name == "lr_scheduler" else getattr(torch.optim, name)


class _Torch:
    def __getattr__(self, name):
        return _Optim() if name == "optim" else getattr(torch, name)


ref.torch = _Torch()
sys.argv = [base, "--lr", str(args.lr), "--warmup", str(args.warmup)] + rest
print(f"# schedule: linear warmup to {peak:g} over {args.warmup} steps, cosine to {floor:g} at step {args.decay_steps}")
ref.main()
