"""One module of checks per lab. Each defines CHECKS, TASKS (run inside checker.worker) and grade()."""
