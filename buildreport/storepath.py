"""Names read from Nix store paths, shared by statistics and events (which the store derives as it writes)."""

from __future__ import annotations


def derivation_name(path: str) -> str:
    """The name part of a derivation's store path: `/nix/store/<hash>-hello-2.12.drv` gives `hello-2.12`."""
    base = path.rsplit("/", 1)[-1].removesuffix(".drv")
    _, dash, name = base.partition("-")
    return name if dash and name else base
