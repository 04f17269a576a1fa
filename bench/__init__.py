"""`make bench`: the figures the course quotes, measured on this machine (bench/RESULTS.md)."""
