"""One module of checks per lab: labN.py declares its CHECKS (each one what it proves, its threshold's reason and
the hint for a failure) and its TASKS (the worker side, run inside checker.worker). The parent side, the runs a
grade starts and the evaluators that turn their measurements into results, is labN_eval.py with its grade(h,
checks); labs 3, 4 and 5 still keep grade() in labN.py. Imports go one way, eval -> lab, never back
(tests/test_layering.py holds it)."""
