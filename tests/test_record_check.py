"""`buildreport runner --check`: what it finds in a set-up, without Nix where it need not run."""

from __future__ import annotations

from pathlib import Path

from buildreport.record.check import _sshd_accepts_tags, check
from buildreport.record.destinations import SpoolSink
from buildreport.record.runner import RunnerConfig


def config(tmp_path: Path, spool: Path) -> RunnerConfig:
    return RunnerConfig(sink=SpoolSink(spool), state_dir=tmp_path / "state", cpu_count=2, allocated_megabytes=1024)


def test_sshd_tags_are_found_in_an_included_file(tmp_path: Path) -> None:
    main = tmp_path / "sshd_config"
    main.write_text("Include /etc/ssh/sshd_config.d/*.conf\nAcceptEnv LANG LC_*\n")
    assert _sshd_accepts_tags(main) is False
    (tmp_path / "sshd_config.d").mkdir()
    (tmp_path / "sshd_config.d" / "buildreport.conf").write_text("AcceptEnv SERVICE_TAG_*  # tags\n")
    assert _sshd_accepts_tags(main) is True
    assert _sshd_accepts_tags(tmp_path / "missing") is None


def test_check_says_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    findings = check(config(tmp_path, tmp_path / "file" / "spool"), {"PATH": str(tmp_path)}, tmp_path / "none")
    missing = [f.text for f in findings if f.level == "missing"]
    assert any(t.startswith("nix-daemon: `nix-daemon` not found") for t in missing)
    assert any(t.startswith("nix: not found") for t in missing)
    assert any(t.startswith(f"spool: cannot write to {tmp_path / 'file' / 'spool'}") for t in missing)
    assert any(f.level == "note" and "AcceptEnv SERVICE_TAG_*" in f.text for f in findings)
