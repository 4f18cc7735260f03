"""The `buildreport` command line: one module per command group, registered in cli/main.py."""
