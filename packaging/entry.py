"""Entry point of the one-file executable built by packaging/buildreport.spec.

`freeze_support()` must run first: `serve --workers N` starts uvicorn's worker processes with the
"spawn" method, which re-runs this executable; the call turns such a re-run into a worker instead
of a second command line. Then the program ties its life to the bootloader's (see lifeline.py).
"""

import multiprocessing

if __name__ == "__main__":
    multiprocessing.freeze_support()

    from buildreport.lifeline import follow_bootloader

    follow_bootloader()  # kill -9 of the bootloader ends this process too

    from buildreport.cli.main import main

    main(prog_name="buildreport")
