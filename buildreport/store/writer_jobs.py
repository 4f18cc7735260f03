"""What a server's workers send its one writer, and what it answers (store/writer.py, store/writer_server.py).

Jobs are a tagged union, one struct per kind of write, and travel as JSON, so times keep their offsets and
records come through as validated. Each is done whole, in the writer's turn, by the store's own functions."""

from __future__ import annotations

import msgspec

from buildreport.models import BuildRecord, InvalidRecord, WriteResult
from buildreport.store import trust
from buildreport.store.hooks import Claimed
from buildreport.store.prune import Policy, Pruned


class WriteBuilds(msgspec.Struct, tag="builds", array_like=True):
    """One request's records, written to an account with the events they make."""

    account: str
    now_us: int
    records: list[BuildRecord]


class Delivered(msgspec.Struct, tag="delivered", array_like=True):
    delivery_id: int
    status: int
    now_us: int


class GiveUp(msgspec.Struct, tag="give_up", array_like=True):
    delivery_id: int
    status: int | None
    error: str
    now_us: int
    disable: bool  # the receiver answered 410 Gone


class RetryLater(msgspec.Struct, tag="retry", array_like=True):
    delivery_id: int
    status: int | None
    error: str
    next_us: int


Settled = Delivered | GiveUp | RetryLater


class ClaimDeliveries(msgspec.Struct, tag="claim", array_like=True):
    """How a delivery went (if one did), then a lease on up to `room` deliveries that are due."""

    now_us: int
    lease_until_us: int
    owner: str
    room: int
    settled: Settled | None = None


class DropOldEvents(msgspec.Struct, tag="drop_events", array_like=True):
    before_us: int
    batch: int


class TouchToken(msgspec.Struct, tag="touch_token", array_like=True):
    """When a token was last used (at most once a minute a token: auth.py decides)."""

    token_id: str
    now_us: int


class IssueToken(msgspec.Struct, tag="issue_token", array_like=True):
    """A token the server issued (an exchange), committed before it is handed out."""

    token: trust.NewToken


class Prune(msgspec.Struct, tag="prune", array_like=True):
    """Retention's prune: batch by batch, each in the writer's turn, so other jobs wait at most one batch."""

    policy: Policy
    now_us: int


Job = WriteBuilds | ClaimDeliveries | DropOldEvents | TouchToken | IssueToken | Prune


class Outcome(msgspec.Struct, omit_defaults=True, array_like=True):
    """Exactly one of: what was done, the records that conflict, or why the database could not be written."""

    result: WriteResult | None = None
    conflicts: list[InvalidRecord] | None = None
    unavailable: str | None = None  # the database failed or refused (a 503)
    failed: str | None = None  # anything else (a 500)
    events: int = 0  # how many events the write made, with `result`
    writer: int = 0  # the process id of the writer that answered
    claimed: list[Claimed] | None = None  # deliveries leased, for ClaimDeliveries
    count: int = 0  # events dropped, for DropOldEvents
    pruned: Pruned | None = None  # for Prune


JOB = msgspec.json.Decoder(Job)
OUTCOME = msgspec.json.Decoder(Outcome)
ENCODER = msgspec.json.Encoder()


def encode_job(account: str, records: list[BuildRecord], now_us: int) -> bytes:
    return ENCODER.encode(WriteBuilds(account, now_us, records))
