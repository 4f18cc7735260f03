"""Recorders: they watch real Nix builds and turn each one into a build record for the spool or a database.

They know Nix and the record format; they never reach into the HTTP layer or SQL.
"""
