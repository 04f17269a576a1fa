"""Lab 1's mutants: one realistic slip each, and the check that must catch it."""
from . import Mutant

MUTANTS = [
    Mutant("seed_ignored", "seeding.py", "    torch.manual_seed(seed)\n", "    torch.manual_seed(0)\n",
           "reproducible", "the seed argument is ignored"),
]
