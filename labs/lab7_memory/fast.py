# GENERATED from solutions/lab7_memory/fast.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Make it fast: predict which optimisations pay on this device, then measure them.

    python -m labs.lab7_memory.fast      # this machine's profile at two shapes, each option predicted and measured

An optimisation is worth switching on where it makes the whole step faster, and that depends on the device and
the shape: the same switch can double tokens/s at one shape and halve it at another. Before switching, measure the
step's parts alone on the device (the profile), reason about which parts each option changes and which it leaves
as they were, and predict; then measure the option itself. The options:
  fused_adamw   AdamW(fused=True): the optimizer's update as one kernel instead of a loop of small ops per tensor
  bf16          forward and the loss under bf16 autocast (the parameters, gradients and moments stay fp32)
  batch2        twice the micro-batch (compared per token: tokens/s, not step time)
The profile (labs/instruments/fast_path.py) measures each part alone on this device; torch.compile is not in the
list: its first step compiles for tens of seconds on a CPU (measured 36-92 s here), longer than this lab's grade.
"""
from __future__ import annotations

OPTIONS = ("fused_adamw", "bf16", "batch2")
PAYS = 1.10  # a predicted speedup at least this large says "switch it on": below it, noise and risk outweigh the gain


def predict_speedup(profile: dict, option: str) -> float:
    """The tokens/s of the training step with `option` over the baseline's, predicted from `profile` alone (its keys:
    labs/instruments/fast_path.py's docstring): >= PAYS means it pays on this device at this shape, < 1 that it
    slows the step. Raises ValueError for an option not in OPTIONS."""
    raise NotImplementedError("TODO(lab7): Your number, from the profile's measurements alone (time nothing yourself), "
                              "is graded two ways. On this machine's profiles, against the option measured: where the "
                              "checker measures a clear gain (>= 1.25x) it must be >= PAYS, where it measures none (<= "
                              "1.02x) below PAYS, and everywhere within a factor of 2. On profiles of devices this "
                              "machine is not (a GPU, a CPU without bf16, steps bound by other parts), where no clock "
                              "decides: within 10% of what the profile's own numbers give. Derive it: which parts of "
                              "the step does the option change, to what (the profile measured each alone), and what "
                              "does it leave as it was? For batch2: what does a step cost whatever its size, and what "
                              "does each token cost? (hints: checker hint lab7 fast.predict_speedup)")
    raise ValueError(f"unknown option {option!r}: one of {OPTIONS}")


def main():
    from labs.instruments import fast_path

    for name, row in fast_path.run().items():
        profile, measured = row["profile"], row["measured"]
        print(f"{name} {tuple(profile['shape'])}: step {profile['step_s'] * 1e3:.1f} ms CPU")
        for option in OPTIONS:
            p = predict_speedup(profile, option)
            print(f"   {option:12s} predicted {p:.2f}x ({'pays' if p >= PAYS else 'does not pay'}), "
                  f"measured {measured[option]:.2f}x")


if __name__ == "__main__":
    main()
