"""The `buildreport` command: the group and the registration of each command group's module."""

from __future__ import annotations

import click

from buildreport import __version__
from buildreport.cli.collect import collect_command
from buildreport.cli.data import export_command, import_command, migrate_command, sample
from buildreport.cli.demo import demo
from buildreport.cli.hooks import hook_group
from buildreport.cli.ops import OPS_COMMANDS
from buildreport.cli.push import push
from buildreport.cli.record import record, runner
from buildreport.cli.serve import serve
from buildreport.cli.shared import CommandGroup
from buildreport.cli.tokens import token


@click.group(cls=CommandGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="buildreport")
def main() -> None:
    """buildreport: reports on remote Nix builds over a JSON API."""


for command in (
    serve, demo, token, hook_group,
    import_command, export_command, migrate_command, sample,
    record, runner, collect_command, push,
    *OPS_COMMANDS,
):
    main.add_command(command)
