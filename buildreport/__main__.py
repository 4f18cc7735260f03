"""`python -m buildreport`: the same command line as the `buildreport` executable."""

from buildreport.cli.main import main

main()
