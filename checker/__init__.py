"""The course autograder: `checker grade labN`. See checker/cli.py."""
