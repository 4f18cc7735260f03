"""The newest finished build of a series, which a badge shows: an account's builds of one derivation name (as
statistics grouped by derivation name it), optionally of one system and carrying given tags."""

from __future__ import annotations

from buildreport.filters import BadgeSeries
from buildreport.models import UNFINISHED
from buildreport.store.dialect import Dialect
from buildreport.store.queries import Query, in_list


def newest_finished(account_id: int, series: BadgeSeries, dialect: Dialect) -> Query:
    """(status, duration in µs) of the series' newest finished build, walking `builds_by_name` newest first."""
    sql = (
        f"SELECT status, duration_us FROM builds WHERE account_id = ? AND {dialect.derivation_name} = ?"
        f" AND status NOT IN {in_list(UNFINISHED)}"
    )
    params: list[object] = [account_id, series.derivation]
    if series.system is not None:
        sql += " AND system = ?"
        params.append(series.system)
    for key, value in series.tags:
        sql += (
            " AND EXISTS (SELECT 1 FROM build_tags t WHERE t.account_id = builds.account_id AND t.key = ?"
            " AND t.value = ? AND t.create_us = builds.create_us AND t.build_id = builds.build_id)"
        )
        params += [key, value]
    return sql + " ORDER BY create_us DESC, build_id DESC LIMIT 1", params
