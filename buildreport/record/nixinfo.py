"""What the runner's own Nix store says about a build's outputs."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -/]*[0-~]")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def outputs(paths: list[str], names: dict[str, str], nix: str = "nix") -> list[dict[str, Any]]:
    """name, path, NAR hash and size of each valid path, from `nix path-info --json`; invalid paths are left out."""
    if not paths:
        return []
    proc = subprocess.run(
        [nix, "--extra-experimental-features", "nix-command", "path-info", "--json", *paths],
        capture_output=True,
        timeout=120,
        check=False,
    )
    infos = json.loads(proc.stdout or b"[]")
    result = []
    for info in infos:
        if not info.get("valid", True) or "narHash" not in info:
            continue
        path = info["path"]
        name = names.get(path, path)
        result.append({"name": name, "path": path, "nar_hash": info["narHash"], "nar_size_bytes": info["narSize"]})
    return sorted(result, key=lambda o: o["name"])
