"""`python -m tests.mutants [LAB ...]`: the kill rate per lab (make bench quotes it)."""
from . import main

main()
