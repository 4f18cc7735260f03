"""buildreport: a self-hostable reporting API for remote Nix builds."""

__version__ = "0.1.0"
