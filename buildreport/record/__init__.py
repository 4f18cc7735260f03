"""Recorders and delivery: the three ways builds are recorded where Nix runs, and how their records reach a
service or a database.

Recorders: `local.py` (`buildreport record -- nix-build …`, with `command.py` and `process.py`),
`runner.py` (one ssh-ng:// session, with `handshake.py`, `protocol.py`, `runner_build.py`, `restarts.py`,
`usage.py`; `check.py` for `runner --check`) and `collect.py` (Nix's JSON log socket). `nix.py` reads Nix's
own files and logs, `records.py` builds and encodes the records, `fit.py` fits them into one request.

Delivery: `destinations.py` puts records in a spool folder or a database; `spool.py` is the spool's file
format; `push.py` sends spooled files to a service (`buildreport push`).
"""
