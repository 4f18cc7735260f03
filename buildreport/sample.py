"""Deterministic, realistic sample builds for demos, tests and benchmarks of buildreport.

`generate` yields `ImportRecord`s that look like a few weeks of remote Nix builds from
CI and from people at their desks; `write_jsonl` stores them as an import file. The
same arguments always give byte-identical output, so the committed sample file can be
checked against a fresh run.
"""

from __future__ import annotations

import base64
import gzip
import math
import random
from array import array
from bisect import bisect
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime, timedelta
from itertools import accumulate
from pathlib import Path
from typing import BinaryIO, NamedTuple, cast

import msgspec

from buildreport.models import BuildOutput, BuildStatus, ImportRecord

# The committed sample dataset, reproducible from these arguments.
SAMPLE_BUILDS = 3000
SAMPLE_DAYS = 30
SAMPLE_ACCOUNTS = ("acme", "globex")
SAMPLE_SEED = 1
# A Saturday, 00:00 UTC: the last day is a working day, so the demo's last 24 hours (its default window) hold
# failures as well as successes.
SAMPLE_END = datetime(2026, 10, 31, tzinfo=UTC)
SAMPLE_PATH = Path("buildreport/sample_data/builds.jsonl.gz")  # inside the package, from the checkout

_BASE_BUILD_ID = 100_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = 1_000_000
_HOUR_US = 3600 * _US
_NIX_BASE32 = "0123456789abcdfghijklmnpqrsvwxyz"
_exp = math.exp  # log-normal draws as exp(gauss), cheaper than Random.lognormvariate
_TIMEOUT_SECONDS = 36_000


def _cum(weights: Iterable[float]) -> tuple[float, ...]:
    """Cumulative weights scaled to end at exactly 1.0, so `bisect(cum, random())` is always in range."""
    cum = list(accumulate(weights))
    total = cum[-1]
    return (*(c / total for c in cum[:-1]), 1.0)


class _Package(NamedTuple):
    pname: str
    version: str
    kind: str  # build system; picks the log template
    seconds: float  # typical build time on 4 cores
    memory_mb: int  # typical peak memory
    disk_mb: int  # typical peak size of the build directory
    size_mb: float  # typical NAR size of the main output
    outputs: tuple[str, ...]
    weight: float  # how often it gets built
    linux_only: bool = False


_PACKAGES: tuple[_Package, ...] = (
    # The projects' own derivations change with every push, so they are built most.
    _Package("webshop-api", "2.14.0", "cargo", 260, 2600, 3400, 18, ("out",), 10),
    _Package("webshop-frontend", "2.14.0", "node", 150, 1900, 1400, 12, ("out",), 9),
    _Package("platform-worker", "0.21.1", "cargo", 320, 3000, 4200, 22, ("out",), 6),
    _Package("infra-tools", "0.9.3", "go", 95, 1300, 1600, 41, ("out",), 6),
    _Package("ml-pipeline", "1.3.0", "python", 70, 900, 500, 3, ("out", "dist"), 6),
    _Package("firmware-image", "3.2.0", "make", 900, 2200, 6000, 64, ("out",), 3, True),
    # Packages from nixpkgs, rebuilt when an overlay or a nixpkgs bump changes them.
    _Package("hello", "2.12.1", "autotools", 22, 120, 40, 0.3, ("out",), 3),
    _Package("openssl", "3.0.14", "make", 260, 700, 900, 6.5, ("bin", "out", "dev"), 4),
    _Package("python3", "3.11.9", "autotools", 620, 1400, 1500, 110, ("out",), 2),
    _Package("rustc", "1.79.0", "cargo", 3600, 9000, 22000, 650, ("out", "man", "doc"), 0.6),
    _Package("nodejs", "20.15.1", "make", 2400, 4500, 7000, 95, ("out", "libv8"), 0.8),
    _Package("ghc", "9.6.6", "haskell", 5400, 7000, 15000, 1700, ("out", "doc"), 0.4),
    _Package("linux", "6.6.41", "kernel", 3000, 3500, 18000, 150, ("out", "dev"), 0.8, True),
    _Package("firefox", "128.0", "make", 5400, 14000, 25000, 250, ("out",), 0.3),
    _Package("postgresql", "16.3", "autotools", 600, 900, 1300, 30, ("out", "lib", "dev"), 2),
    _Package("curl", "8.8.0", "autotools", 130, 350, 300, 1.2, ("bin", "out", "dev"), 3),
    _Package("zlib", "1.3.1", "cmake", 15, 80, 20, 0.2, ("out", "dev"), 3),
    _Package("sqlite", "3.46.0", "autotools", 95, 500, 200, 2.1, ("bin", "out", "dev"), 2.5),
    _Package("git", "2.45.2", "make", 420, 800, 900, 55, ("out", "doc"), 1.5),
    _Package("bash", "5.2p26", "autotools", 120, 250, 150, 6, ("out", "man", "doc"), 1.5),
    _Package("coreutils", "9.5", "autotools", 300, 300, 400, 17, ("out", "info"), 1),
    _Package("glibc", "2.39-52", "autotools", 1500, 1500, 3000, 45, ("out", "bin", "dev"), 0.5, True),
    _Package("gcc", "13.3.0", "autotools", 4800, 5500, 14000, 230, ("out", "man", "info"), 0.3),
    _Package("llvm", "17.0.6", "cmake", 5400, 12000, 20000, 420, ("out", "lib", "dev"), 0.3),
    _Package("cmake", "3.29.6", "cmake", 900, 1200, 1600, 60, ("out", "doc"), 0.8),
    _Package("boost", "1.81.0", "make", 1800, 3000, 6000, 120, ("out", "dev"), 0.6),
    _Package("libxml2", "2.12.7", "autotools", 130, 300, 250, 3, ("bin", "out", "dev"), 2),
    _Package("libffi", "3.4.6", "autotools", 40, 150, 60, 0.4, ("out", "dev", "man"), 1.5),
    _Package("zstd", "1.5.6", "make", 90, 300, 150, 1.8, ("bin", "out", "dev"), 1.5),
    _Package("ffmpeg", "6.1.1", "autotools", 900, 1600, 2200, 40, ("bin", "out", "dev"), 1),
    _Package("imagemagick", "7.1.1-34", "autotools", 650, 1100, 1200, 25, ("out", "dev", "doc"), 0.8),
    _Package("nginx", "1.26.1", "autotools", 120, 300, 200, 3.5, ("out", "doc"), 2),
    _Package("redis", "7.2.5", "make", 190, 500, 400, 12, ("out",), 1.5),
    _Package("go", "1.22.5", "go", 900, 2500, 3500, 230, ("out",), 0.6),
    _Package("terraform", "1.9.2", "go", 400, 2800, 2000, 95, ("out",), 1),
    _Package("ripgrep", "14.1.0", "cargo", 190, 1500, 1800, 5, ("out",), 1.5),
    _Package("fd", "10.1.0", "cargo", 120, 1200, 1300, 3.5, ("out",), 1),
    _Package("jq", "1.7.1", "autotools", 60, 250, 100, 1.4, ("bin", "out", "dev"), 2),
    _Package("neovim", "0.10.0", "cmake", 300, 900, 700, 28, ("out",), 1),
    _Package("tmux", "3.4", "autotools", 60, 200, 80, 1.1, ("out", "man"), 1),
    _Package("perl", "5.38.2", "make", 520, 500, 700, 60, ("out", "man", "devdoc"), 0.8),
    _Package("ruby", "3.3.3", "autotools", 700, 1200, 1400, 40, ("out", "devdoc"), 0.8),
    _Package("qtbase", "6.7.2", "cmake", 2400, 4000, 9000, 90, ("out", "dev"), 0.4),
    _Package("gtk4", "4.14.4", "meson", 900, 1800, 2500, 35, ("out", "dev", "doc"), 0.5),
    _Package("mesa", "24.1.4", "meson", 1200, 2500, 3500, 80, ("out", "dev", "drivers"), 0.4, True),
    _Package("systemd", "255.9", "meson", 1500, 2000, 3000, 45, ("out", "dev", "man"), 0.5, True),
    _Package("python3.11-numpy", "1.26.4", "python", 420, 1500, 900, 40, ("out", "dist"), 1.5),
    _Package("python3.11-pandas", "2.2.2", "python", 700, 2200, 1500, 70, ("out", "dist"), 1),
    _Package("python3.11-torch", "2.3.1", "python", 7200, 16000, 30000, 900, ("out", "dev", "lib"), 0.2),
    _Package("python3.11-requests", "2.32.3", "python", 25, 150, 50, 0.5, ("out", "dist"), 2),
    _Package("pandoc", "3.1.11.1", "haskell", 1800, 6000, 4000, 190, ("out",), 0.4),
)
_NAMES = tuple(f"{p.pname}-{p.version}" for p in _PACKAGES)
_BIG_PACKAGES = tuple(i for i, p in enumerate(_PACKAGES) if p.seconds >= 1800 and not p.linux_only)
# Share of the main output's size that each other output has.
_OUTPUT_SHARE = {
    "out": 1.0,
    "bin": 0.5,
    "lib": 0.7,
    "dev": 0.06,
    "doc": 0.12,
    "man": 0.02,
    "info": 0.03,
    "dist": 0.4,
    "devdoc": 0.15,
    "libv8": 0.45,
    "drivers": 1.3,
}

# (name, weight, how much slower than x86_64-linux, how much longer the queue)
_SYSTEMS = (
    ("x86_64-linux", 72, 1.0, 1.0),
    ("aarch64-linux", 14, 1.15, 1.5),
    ("x86_64-darwin", 5, 1.5, 4.0),
    ("aarch64-darwin", 9, 0.9, 3.0),
)
_SYSTEM_CUM = _cum(s[1] for s in _SYSTEMS)
_LINUX_SYSTEMS = 2  # the first two systems run Linux

_CPU_COUNTS = (1, 2, 4, 8, 16)
# Builds scale sublinearly with cores; relative to the 4-core time in the table.
_CPU_SPEED = tuple((4 / c) ** 0.7 for c in _CPU_COUNTS)

_STATUSES = tuple(BuildStatus)
_S = {s: i for i, s in enumerate(_STATUSES)}
_BUILT, _FAILED, _CANCELLED, _TIMEOUT = (
    _S[BuildStatus.built],
    _S[BuildStatus.build_failed],
    _S[BuildStatus.cancelled],
    _S[BuildStatus.timeout],
)
_INTERNAL, _OOM, _MAX_MEMORY = (
    _S[BuildStatus.internal_error],
    _S[BuildStatus.out_of_memory],
    _S[BuildStatus.max_memory_exceeded],
)
_DISCONNECT, _CLIENT_ERROR = _S[BuildStatus.client_disconnect], _S[BuildStatus.client_error]
_PENDING, _RUNNING = _S[BuildStatus.pending], _S[BuildStatus.running]
# Per-mille shares of how finished builds end; a restart after running out of memory
# lands on a loaded machine more often.
_FIRST_STATUS_CUM = _cum((820, 90, 25, 5, 16, 10, 10, 12, 8))
_RESTART_STATUS_CUM = _cum((780, 80, 10, 5, 20, 80, 10, 10, 5))
_RESTART_CHANCE = {_INTERNAL: 0.9, _OOM: 0.75}

# Local working rhythm: Monday..Sunday and hour 0..23.
_WEEKDAY_WEIGHT = (1.0, 1.05, 1.05, 1.0, 0.85, 0.2, 0.14)
_HOUR_WEIGHT_AM = (0.12, 0.08, 0.06, 0.05, 0.06, 0.1, 0.25, 0.55, 1.0, 1.35, 1.45, 1.4)
_HOUR_WEIGHT_PM = (1.1, 1.3, 1.5, 1.5, 1.4, 1.2, 0.9, 0.65, 0.5, 0.4, 0.3, 0.2)
_HOUR_WEIGHT = _HOUR_WEIGHT_AM + _HOUR_WEIGHT_PM
_UTC_OFFSET_HOURS = (1, -5, 8, -8, 5, 0)  # accounts work from different time zones

# (repository, project tag, packages the repository mostly builds)
_REPOSITORIES = (
    ("webshop", "web", ("webshop-api", "webshop-frontend", "postgresql", "openssl", "nginx", "nodejs")),
    ("infra", "infra", ("infra-tools", "terraform", "go", "linux", "systemd", "nginx")),
    ("ml-pipeline", "ml", ("ml-pipeline", "python3.11-numpy", "python3.11-pandas", "python3.11-torch", "python3")),
    ("platform", "platform", ("platform-worker", "postgresql", "redis", "rustc", "zstd")),
    ("firmware", "embedded", ("firmware-image", "gcc", "linux", "zlib", "glibc")),
    ("mobile-app", "mobile", ("webshop-frontend", "nodejs", "sqlite", "imagemagick")),
    ("data-warehouse", "data", ("postgresql", "python3.11-pandas", "sqlite", "python3")),
    ("dev-env", "tools", ("neovim", "tmux", "ripgrep", "fd", "jq", "git")),
)
_REPOS_PER_ACCOUNT = 3
_REPO_WEIGHT_CUM = _cum((6, 3, 1))
_FAVOURITE_BOOST = 12.0
_MANUAL_RUN_SHARE = 0.12  # builds started by hand over SSH carry no CI tags
_VARIANTS = 24  # distinct derivations per package and system over the period


def generate(
    *, builds: int, days: int, accounts: Sequence[str], seed: int, end: datetime, log_share: float = 1.0
) -> Iterator[ImportRecord]:
    """Yield `builds` sample builds created in `[end - days, end)`, oldest first.

    Builds still pending or running at `end` have no duration; a share `log_share`
    of the others carries a build log.
    """
    if builds < 0 or days < 1 or not accounts or not 0.0 <= log_share <= 1.0:
        raise ValueError("need builds >= 0, days >= 1, at least one account and 0 <= log_share <= 1")
    if end.tzinfo is None:
        raise ValueError("end must be timezone-aware")
    end_us = (end - _EPOCH) // timedelta(microseconds=1)
    planner = _Planner(random.Random(seed), builds, end_us - days * 86_400 * _US, end_us, len(accounts))
    plan = planner.make()
    # Logs draw from their own stream so the builds are the same whatever log_share is.
    maker = _RecordMaker(random.Random(seed ^ 0x5EED_106), plan, tuple(accounts), log_share)
    return maker.records(planner.rng)


def write_jsonl(records: Iterable[ImportRecord], path: Path) -> int:
    """Write records as JSON Lines, gzip-compressed if the name ends in `.gz`; return the count."""
    path = Path(path)
    encoder = msgspec.json.Encoder()
    count = 0
    buffer = bytearray()
    with open(path, "wb") as raw, _compressor(raw, path) as out:
        for record in records:
            encoder.encode_into(record, buffer, -1)
            buffer.append(10)  # newline
            count += 1
            if len(buffer) >= 1 << 20:
                out.write(buffer)
                buffer.clear()
        out.write(buffer)
    return count


def _compressor(raw: BinaryIO, path: Path) -> AbstractContextManager[BinaryIO]:
    if not path.name.endswith(".gz"):
        return nullcontext(raw)
    # No file name and no time in the gzip header, so equal records give equal bytes.
    return cast(BinaryIO, gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0))


def _store_hash(rng: random.Random) -> str:
    """32 characters of Nix base32, as in a store path."""
    bits = rng.getrandbits(160)
    return "".join([_NIX_BASE32[(bits >> shift) & 31] for shift in range(0, 160, 5)])


def _pick(rng: random.Random, cum: tuple[float, ...]) -> int:
    """Index drawn from cumulative weights made by `_cum`."""
    return bisect(cum, rng.random())


class _Plan:
    """The skeleton of every build, in columns so a million builds stay small.

    Builds are numbered in planning order ("seq"); `small` packs status, package,
    system, derivation variant and cpu index into one integer.
    """

    def __init__(self) -> None:
        self.create_us = array("q")
        self.queue_ms = array("q")
        self.duration_ms = array("q")  # -1 while pending or running
        self.small = array("q")
        self.run = array("q")
        self.restart_of: dict[int, int] = {}
        self.restarted_as: dict[int, int] = {}
        self.run_account = array("q")
        self.run_repo = array("q")  # -1 for builds started by hand
        self.run_id = array("q")
        self.run_attempt = array("q")

    def __len__(self) -> int:
        return len(self.create_us)


def _pack(status: int, pkg: int, system: int, variant: int, cpu: int) -> int:
    return status | pkg << 4 | system << 10 | variant << 12 | cpu << 18


class _Planner:
    """Decides when each build happens, what it builds and how it ends."""

    def __init__(self, rng: random.Random, builds: int, start_us: int, end_us: int, accounts: int) -> None:
        self.rng = rng
        self.builds = builds
        self.start_us = start_us
        self.end_us = end_us
        self.plan = _Plan()
        self.account_cum = _cum(0.43**i for i in range(accounts))
        self.hours = self._hours()
        self.hour_cum = tuple(self._hour_cum(i) for i in range(accounts))
        self.default_pkg_cum = _cum(p.weight for p in _PACKAGES)
        self.repo_pkg_cum = tuple(self._repo_pkg_cum(favourites) for _, _, favourites in _REPOSITORIES)
        self.used_run_ids: set[int] = set()

    def _hours(self) -> list[tuple[int, int, int]]:
        """Whole UTC hours overlapping the period, as (hour since epoch, first us, end us)."""
        first, last = self.start_us // _HOUR_US, (self.end_us - 1) // _HOUR_US
        return [
            (h, max(h * _HOUR_US, self.start_us), min((h + 1) * _HOUR_US, self.end_us)) for h in range(first, last + 1)
        ]

    def _hour_cum(self, account: int) -> tuple[float, ...]:
        offset = _UTC_OFFSET_HOURS[account % len(_UTC_OFFSET_HOURS)]
        weights = []
        for hour, lo, hi in self.hours:
            local = hour + offset
            weekday = (local // 24 + 3) % 7  # 1970-01-01 was a Thursday
            weights.append(_WEEKDAY_WEIGHT[weekday] * _HOUR_WEIGHT[local % 24] * (hi - lo) / _HOUR_US)
        return _cum(weights)

    @staticmethod
    def _repo_pkg_cum(favourites: tuple[str, ...]) -> tuple[float, ...]:
        return _cum(p.weight * (_FAVOURITE_BOOST if p.pname in favourites else 1.0) for p in _PACKAGES)

    def make(self) -> _Plan:
        if self.builds:
            self._active_run()
        while len(self.plan) < self.builds:
            self._run()
        return self.plan

    def _new_run(self, account: int, t0: int, manual: bool) -> tuple[int, int]:
        """Register a CI run (or a manual session); return its index and repository."""
        rng, plan = self.rng, self.plan
        repo = -1 if manual else (account * _REPOS_PER_ACCOUNT + _pick(rng, _REPO_WEIGHT_CUM)) % len(_REPOSITORIES)
        # GitHub run ids grow with time and are unique.
        run_id = 12_000_000_000 + (t0 // _US - 1_700_000_000) * 40 + rng.randrange(40)
        while run_id in self.used_run_ids:
            run_id += 1
        self.used_run_ids.add(run_id)
        roll = rng.random()
        plan.run_account.append(account)
        plan.run_repo.append(repo)
        plan.run_id.append(run_id)
        plan.run_attempt.append(3 if roll < 0.01 else 2 if roll < 0.07 else 1)
        return len(plan.run_id) - 1, repo

    def _active_run(self) -> None:
        """A CI run still in progress at `end`, so the newest builds are pending or running."""
        rng = self.rng
        jobs = max(1, min(rng.randint(4, 10), self.builds // 100))
        t0 = max(self.start_us, self.end_us - rng.randrange(4 * 60 * _US, 25 * 60 * _US))
        run, repo = self._new_run(0, t0, manual=False)
        for job in range(jobs):
            if job == jobs - 1 and jobs > 1:  # the newest one still waits for a builder
                create = self.end_us - rng.randrange(5 * _US, 90 * _US)
                self._chain(run, repo, create, force=_PENDING)
            elif job == 0:  # a large package keeps one build running
                self._chain(run, repo, t0, pkg=rng.choice(_BIG_PACKAGES), system=0, force=_RUNNING)
            else:
                self._chain(run, repo, t0 + rng.randrange(self.end_us - t0))

    def _run(self) -> None:
        """A CI run (or a manual session) with a few builds created within minutes."""
        rng = self.rng
        account = _pick(rng, self.account_cum)
        cum = self.hour_cum[account]
        _, lo, hi = self.hours[_pick(rng, cum)]
        t0 = lo + int(rng.random() * (hi - lo))
        manual = rng.random() < _MANUAL_RUN_SHARE
        run, repo = self._new_run(account, t0, manual)
        jobs = rng.randint(1, 3) if manual else min(40, 1 + int(rng.expovariate(0.25)))
        for _ in range(jobs):
            if len(self.plan) >= self.builds:
                return
            create = t0 + int(rng.expovariate(1 / 120) * _US)
            if create >= self.end_us:
                create = t0 + int(rng.random() * (self.end_us - t0))
            self._chain(run, repo, create)

    def _chain(self, run: int, repo: int, create: int, pkg: int = -1, system: int = -1, force: int = -1) -> None:
        """One derivation's build, followed by restarts while the service lets it down."""
        rng = self.rng
        if pkg < 0:
            pkg = _pick(rng, self.default_pkg_cum if repo < 0 else self.repo_pkg_cum[repo])
        if system < 0:
            system = _pick(rng, _SYSTEM_CUM)
        if _PACKAGES[pkg].linux_only:
            system %= _LINUX_SYSTEMS
        variant = rng.randrange(_VARIANTS)
        cpu = self._cpu_index(pkg)
        status: int | tuple[int, ...] = _BUILT if force >= 0 else _FIRST_STATUS_CUM
        previous = -1
        while True:
            seq, status, stop = self._build(run, create, pkg, system, variant, cpu, status, force)
            if previous >= 0:
                self.plan.restart_of[seq] = previous
                self.plan.restarted_as[previous] = seq
            if status not in _RESTART_CHANCE or rng.random() >= _RESTART_CHANCE[status]:
                return
            create = stop + int(rng.uniform(2, 90) * _US)
            if create >= self.end_us or len(self.plan) >= self.builds:
                return
            previous, status = seq, _RESTART_STATUS_CUM

    def _cpu_index(self, pkg: int) -> int:
        seconds, roll = _PACKAGES[pkg].seconds, self.rng.random()
        if seconds < 120:
            return 0 if roll < 0.3 else 1 if roll < 0.75 else 2
        if seconds < 1200:
            return 1 if roll < 0.2 else 2 if roll < 0.75 else 3
        return 3 if roll < 0.55 else 4

    def _build(
        self,
        run: int,
        create: int,
        pkg: int,
        system: int,
        variant: int,
        cpu: int,
        status: int | tuple[int, ...],
        force: int,
    ) -> tuple[int, int, int]:
        """Append one build; return its seq, final status and stop time.

        `status` is a fixed status index or cumulative weights to draw one from; builds
        that have not started or finished by `end` become pending or running, and `force`
        makes that so whatever the times say.
        """
        rng, plan = self.rng, self.plan
        if not isinstance(status, int):
            status = _pick(rng, status)
        queue_ms = self._queue_ms(system)
        duration_ms = self._duration_ms(pkg, system, cpu, status)
        start = create + queue_ms * 1000
        stop = start + duration_ms * 1000
        if force == _PENDING or start >= self.end_us:
            status, duration_ms = _PENDING, -1
            queue_ms = (self.end_us - create) // 1000  # waited so far
        elif force == _RUNNING or stop > self.end_us:
            status, duration_ms = _RUNNING, -1
        plan.create_us.append(create)
        plan.queue_ms.append(queue_ms)
        plan.duration_ms.append(duration_ms)
        plan.small.append(_pack(status, pkg, system, variant, cpu))
        plan.run.append(run)
        return len(plan) - 1, status, stop

    def _queue_ms(self, system: int) -> int:
        rng = self.rng
        seconds = 0.15 + rng.expovariate(1 / 1.5)
        if rng.random() < 0.03:  # all builders of this system busy for a while
            seconds += rng.uniform(20, 600)
        return int(seconds * _SYSTEMS[system][3] * 1000)

    def _duration_ms(self, pkg: int, system: int, cpu: int, status: int) -> int:
        rng = self.rng
        if status == _CLIENT_ERROR:  # rejected before anything ran
            return int(rng.uniform(0.05, 3.0) * 1000)
        full = _PACKAGES[pkg].seconds * _SYSTEMS[system][2] * _CPU_SPEED[cpu] * _exp(rng.gauss(0, 0.35))
        if status == _BUILT:
            seconds = full
        elif status == _TIMEOUT:
            seconds = full * rng.uniform(0.1, 0.9) + _TIMEOUT_SECONDS
        else:  # failures and cancellations stop part-way through
            seconds = full * rng.uniform(0.03, 0.95)
        return max(500, int(seconds * 1000))


class _Drv(NamedTuple):
    path: str
    source: str
    outputs: tuple[tuple[str, str, str, int], ...]  # name, path, nar_hash, nar_size_bytes


class _RecordMaker:
    """Turns the plan into records in creation order, filling in the details."""

    def __init__(self, log_rng: random.Random, plan: _Plan, accounts: tuple[str, ...], log_share: float) -> None:
        self.plan = plan
        self.accounts = accounts
        self.log_share = log_share
        self.log_rng = log_rng
        self.logs = _LogWriter(log_rng)
        self.drvs: dict[int, _Drv] = {}

    def records(self, rng: random.Random) -> Iterator[ImportRecord]:
        plan = self.plan
        order = sorted(range(len(plan)), key=plan.create_us.__getitem__)  # stable: ties keep plan order
        position = array("q", bytes(8 * len(order)))
        for pos, seq in enumerate(order):
            position[seq] = pos
        for seq in order:
            yield self._record(rng, seq, position)

    def _drv(self, rng: random.Random, key: int) -> _Drv:
        """The derivation and its outputs; the same key always gives the same store paths."""
        drv = self.drvs.get(key)
        if drv is None:
            pkg = _PACKAGES[key & 63]
            name = _NAMES[key & 63]
            outputs = []
            for output in pkg.outputs:
                suffix = "" if output == "out" else f"-{output}"
                size = int(pkg.size_mb * 1e6 * _OUTPUT_SHARE[output] * rng.lognormvariate(0, 0.2)) + 4096
                nar_hash = "sha256-" + base64.b64encode(rng.randbytes(32)).decode()
                outputs.append((output, f"/nix/store/{_store_hash(rng)}-{name}{suffix}", nar_hash, size))
            drv = _Drv(f"/nix/store/{_store_hash(rng)}-{name}.drv", _store_hash(rng), tuple(outputs))
            self.drvs[key] = drv
        return drv

    def _record(self, rng: random.Random, seq: int, position: array[int]) -> ImportRecord:
        plan = self.plan
        small = plan.small[seq]
        status, pkg_index, system, cpu = small & 15, small >> 4 & 63, small >> 10 & 3, small >> 18
        pkg = _PACKAGES[pkg_index]
        drv = self._drv(rng, small >> 4 & 0x3FFF)
        create_us, queue_ms, duration_ms = plan.create_us[seq], plan.queue_ms[seq], plan.duration_ms[seq]
        cpu_count = _CPU_COUNTS[cpu]
        allocated = cpu_count * (4096 if rng.random() < 0.6 else 2048)
        finished = duration_ms >= 0
        duration = duration_ms / 1000 if finished else None
        utilization = self._utilization(rng, pkg, status) if finished else None
        cpu_seconds = int(duration * cpu_count * utilization) if duration is not None and utilization else 0
        peak_memory = self._peak_memory(rng, pkg, status, allocated) if finished else None
        peak_storage = (
            int(pkg.disk_mb * 1024 * rng.uniform(0.6, 1.2) * (1 if status == _BUILT else 0.5)) if finished else None
        )
        run = plan.run[seq]
        restart_of = plan.restart_of.get(seq)
        restarted_as = plan.restarted_as.get(seq)
        record = ImportRecord(
            build_id=_BASE_BUILD_ID + position[seq],
            create_time=_EPOCH + timedelta(microseconds=create_us),
            start_time=_EPOCH + timedelta(microseconds=create_us + queue_ms * 1000),
            queue_time_seconds=queue_ms / 1000,
            duration_seconds=duration,
            build_status=_STATUSES[status],
            status_message=None if status == _BUILT else self._message(rng, status, pkg, drv.path, allocated),
            cpu_count=cpu_count,
            allocated_megabytes=allocated,
            cpu_seconds=cpu_seconds,
            average_cpu_utilization=utilization,
            peak_memory_use_kilobytes=peak_memory,
            peak_storage_use_kilobytes=peak_storage,
            derivation_path=drv.path,
            outputs=[BuildOutput(*o) for o in drv.outputs] if status == _BUILT else [],
            system=_SYSTEMS[system][0],
            tags=self._tags(run),
            restart_of_build_id=None if restart_of is None else _BASE_BUILD_ID + position[restart_of],
            restarted_as_build_id=None if restarted_as is None else _BASE_BUILD_ID + position[restarted_as],
            account=self.accounts[plan.run_account[run]],
        )
        if status != _PENDING and self.log_rng.random() < self.log_share:
            record.log = self.logs.log(pkg, system, cpu_count, drv, status, duration or 0.0, record.status_message)
        return record

    @staticmethod
    def _utilization(rng: random.Random, pkg: _Package, status: int) -> float:
        if status == _CLIENT_ERROR:
            return round(rng.uniform(0.0, 0.05), 3)
        # Big C++ and Rust builds keep every core busy; small ones wait on configure scripts.
        base = 0.85 if pkg.seconds >= 1200 else 0.6 if pkg.seconds >= 200 else 0.4
        return round(min(1.0, base * rng.uniform(0.75, 1.15)), 3)

    @staticmethod
    def _peak_memory(rng: random.Random, pkg: _Package, status: int, allocated_mb: int) -> int:
        if status == _MAX_MEMORY:  # killed at its own limit
            return int(allocated_mb * 1024 * rng.uniform(1.0, 1.01))
        if status == _OOM:  # the machine ran out, not the build
            return int(allocated_mb * 1024 * rng.uniform(0.55, 0.95))
        return int(min(pkg.memory_mb * _exp(rng.gauss(0, 0.3)), allocated_mb * 0.95) * 1024)

    @staticmethod
    def _message(rng: random.Random, status: int, pkg: _Package, drv_path: str, allocated_mb: int) -> str | None:
        if status == _FAILED:
            code = 101 if pkg.kind == "cargo" else rng.choice((1, 2, 2, 2))  # cargo exits 101 on errors
            return f"builder for '{drv_path}' failed with exit code {code}"
        if status == _TIMEOUT:
            return f"building of '{drv_path}' timed out after {_TIMEOUT_SECONDS} seconds of silence"
        if status == _MAX_MEMORY:
            return f"build used more than its {allocated_mb} MB memory allocation and was killed"
        if status == _OOM:
            return "build machine ran out of memory; the build was killed"
        if status == _INTERNAL:
            return rng.choice(
                (
                    "lost connection to the build machine",
                    "build machine was shut down unexpectedly",
                    "internal error while uploading build outputs",
                )
            )
        if status == _CANCELLED:
            return rng.choice(("cancelled by user", "cancelled: superseded by a newer CI run"))
        if status == _DISCONNECT:
            return "client disconnected before the build finished"
        if status == _CLIENT_ERROR:
            return rng.choice(
                (
                    "derivation has inputs that were never uploaded",
                    "invalid derivation: unknown system feature 'kvm'",
                    "client sent a malformed derivation",
                )
            )
        return None

    def _tags(self, run: int) -> dict[str, str]:
        plan = self.plan
        repo = plan.run_repo[run]
        if repo < 0:
            return {}
        name, project, _ = _REPOSITORIES[repo]
        owner = self.accounts[plan.run_account[run]]
        return {
            "GITHUB_REPOSITORY": f"{owner}/{name}",
            "GITHUB_RUN_ID": str(plan.run_id[run]),
            "GITHUB_RUN_ATTEMPT": str(plan.run_attempt[run]),
            "project": project,
        }


# ---------------------------------------------------------------------------
# Build logs, from templates per build system so they read right and compress well.

_KILLED = {
    "c": "g++: fatal error: Killed signal terminated program cc1plus",
    "cargo": "  process didn't exit successfully: `rustc --crate-name {crate} --edition=2021`"
    " (signal: 9, SIGKILL: kill)",
    "haskell": "ghc: internal error: Unable to commit 1048576 bytes of memory",
    "go": "go: error obtaining buildID for go tool compile: signal: killed",
    "node": "FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory",
    "python": "Killed",
}
_GREEN, _RED, _YELLOW, _BOLD, _RESET = "\x1b[32m", "\x1b[31m", "\x1b[33m", "\x1b[1m", "\x1b[0m"
_GCC_ERROR = "\x1b[01m\x1b[K{file}:{line}:{col}:\x1b[m\x1b[K \x1b[01;31m\x1b[Kerror: \x1b[m\x1b[K{msg}"
_C_FILES = (
    "src/main.c",
    "src/util.c",
    "src/parser.c",
    "src/config.c",
    "lib/hash.c",
    "lib/xmalloc.c",
    "lib/buffer.c",
    "src/io.c",
    "src/net/socket.c",
    "src/cache.c",
    "lib/strbuf.c",
    "src/log.c",
    "crypto/evp/digest.c",
    "src/compress.c",
    "lib/regex.c",
    "src/server.c",
)
_CXX_FILES = (
    "src/core/engine.cpp",
    "src/core/scheduler.cpp",
    "src/io/file.cpp",
    "src/util/string.cpp",
    "lib/Support/APInt.cpp",
    "lib/IR/Verifier.cpp",
    "src/gui/widget.cpp",
    "src/net/http.cpp",
)
_C_ERRORS = (
    "'struct token' has no member named 'kind'",
    "implicit declaration of function 'strlcpy'",
    "conflicting types for 'xmalloc'",
    "expected ';' before '}' token",
    "too few arguments to function 'buffer_init'",
    "unknown type name 'ssize_t'",
)
_CONFIGURE_CHECKS = (
    "for a BSD-compatible install... {deps[coreutils]}/bin/install -c",
    "whether build environment is sane... yes",
    "for a race-free mkdir -p... {deps[coreutils]}/bin/mkdir -p",
    "for gawk... gawk",
    "whether make sets $(MAKE)... yes",
    "for gcc... gcc",
    "whether the C compiler works... yes",
    "for C compiler default output file name... a.out",
    "for suffix of executables... ",
    "whether we are cross compiling... no",
    "for suffix of object files... o",
    "whether the compiler supports GNU C... yes",
    "whether gcc accepts -g... yes",
    "for stdio.h... yes",
    "for stdlib.h... yes",
    "for string.h... yes",
    "for inttypes.h... yes",
    "for unistd.h... yes",
    "for pkg-config... {deps[pkg-config-wrapper]}/bin/pkg-config",
    "for zlib... yes",
    "for pthread_create in -lpthread... yes",
    "size of long... 8",
    "for working alloca.h... yes",
    "whether byte ordering is bigendian... no",
    "for dlopen in -ldl... yes",
)
_CRATES = (
    "serde v1.0.203",
    "serde_json v1.0.120",
    "tokio v1.38.0",
    "libc v0.2.155",
    "syn v2.0.68",
    "proc-macro2 v1.0.86",
    "quote v1.0.36",
    "regex v1.10.5",
    "clap v4.5.8",
    "anyhow v1.0.86",
    "hyper v1.4.0",
    "tracing v0.1.40",
    "futures-util v0.3.30",
    "bytes v1.6.0",
    "memchr v2.7.4",
    "aho-corasick v1.1.3",
    "sqlx v0.7.4",
    "axum v0.7.5",
    "rand v0.8.5",
    "thiserror v1.0.61",
)
_RUST_ERRORS = (
    ("E0308", "mismatched types"),
    ("E0425", "cannot find value `order_id` in this scope"),
    ("E0599", "no method named `unwrap_or_default` found for enum `Result`"),
    ("E0382", "borrow of moved value: `request`"),
)
_RUST_FILES = ("src/handlers/orders.rs", "src/db/mod.rs", "src/main.rs", "src/config.rs", "src/queue/worker.rs")
_GO_PACKAGES = (
    "github.com/spf13/cobra",
    "github.com/spf13/pflag",
    "golang.org/x/sys/unix",
    "golang.org/x/net/http2",
    "google.golang.org/protobuf/proto",
    "github.com/hashicorp/hcl/v2",
    "github.com/aws/aws-sdk-go-v2/aws",
    "github.com/prometheus/client_golang/prometheus",
    "go.uber.org/zap",
    "gopkg.in/yaml.v3",
)
_PY_MODULES = ("core", "io", "utils", "frame", "series", "indexing", "parsers", "api", "models", "tests/conftest")
_HS_MODULES = (
    "Data.Text.Extra",
    "Text.Pandoc.Options",
    "Text.Pandoc.Readers.Markdown",
    "GHC.Core.Opt.Simplify",
    "Control.Monad.Extra",
    "Data.Map.Strict.Internal",
    "Text.Pandoc.Writers.HTML",
    "GHC.Tc.Gen.Expr",
)
_KERNEL_FILES = (
    "kernel/sched/core.o",
    "mm/page_alloc.o",
    "fs/ext4/inode.o",
    "net/ipv4/tcp.o",
    "drivers/net/ethernet/intel/e1000e/netdev.o",
    "drivers/gpu/drm/drm_atomic.o",
    "arch/x86/kernel/setup.o",
    "block/blk-mq.o",
    "fs/btrfs/extent-tree.o",
    "drivers/nvme/host/core.o",
    "lib/string.o",
)
_NODE_FILES = ("src/components/Cart.tsx", "src/pages/Checkout.tsx", "src/api/client.ts", "src/store/orders.ts")
_TEST_NAMES = (
    "basic",
    "parse",
    "roundtrip",
    "unicode",
    "large-input",
    "errors",
    "concurrency",
    "compat",
    "api",
    "regression-1432",
    "empty",
    "limits",
)
_DEP_NAMES = (
    "coreutils-9.5",
    "bash-5.2p26",
    "gcc-wrapper-13.3.0",
    "binutils-2.42",
    "pkg-config-wrapper-0.29.2",
    "gnumake-4.4.1",
    "cmake-3.29.6",
    "ninja-1.12.1",
    "meson-1.4.1",
    "patchelf-0.15.0",
    "zlib-1.3.1",
    "cargo-1.79.0",
    "go-1.22.5",
    "python3-3.11.9",
    "nodejs-20.15.1",
    "ghc-9.6.6",
)


class _LogWriter:
    """Writes Nix build logs; store paths of common dependencies stay fixed within a dataset."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.deps = {name.rsplit("-", 1)[0]: f"/nix/store/{_store_hash(rng)}-{name}" for name in _DEP_NAMES}

    def log(
        self, pkg: _Package, system: int, cpus: int, drv: _Drv, status: int, duration: float, message: str | None
    ) -> str:
        lines = [f"building '{drv.path}'..."]
        if status == _CLIENT_ERROR:
            lines.append(f"error: {message}")
            return "\n".join(lines) + "\n"
        phases = (self._unpack, self._configure, self._build, self._check, self._install, self._fixup)
        upto = self._phases_reached(pkg, status)
        ctx = _LogContext(pkg, system, cpus, drv, duration)
        for i, phase in enumerate(phases[:upto]):
            # Every phase but the last one reached ran to its end.
            phase(ctx, lines, status == _BUILT or i < upto - 1)
        if status == _FAILED:
            self._failure(ctx, lines, upto == 4, message or "")
        else:
            self._ending(ctx, lines, status, message)
        return "\n".join(lines) + "\n"

    def _phases_reached(self, pkg: _Package, status: int) -> int:
        """How many phases of unpack, configure, build, check, install, fixup the log shows."""
        rng = self.rng
        if status == _BUILT:
            return 6
        tests_run = pkg.kind not in ("node", "kernel")
        if status == _FAILED:
            return 4 if tests_run and rng.random() < 0.35 else 3
        if status in (_OOM, _MAX_MEMORY):
            return 3
        if status == _TIMEOUT:
            return 4 if tests_run and rng.random() < 0.5 else 3
        return rng.randint(1, 4)

    def _unpack(self, ctx: _LogContext, lines: list[str], done: bool) -> None:
        rng, pkg = self.rng, ctx.pkg
        archive = f"/nix/store/{ctx.drv.source}-" + ("source" if ctx.root == "source" else f"{ctx.root}.tar.xz")
        lines += [
            "unpacking sources",
            f"unpacking source archive {archive}",
            f"source root is {ctx.root}",
            f"setting SOURCE_DATE_EPOCH to timestamp {1_700_000_000 + _stable_hash(pkg.pname) % 30_000_000} "
            f"of file {ctx.root}/{'Cargo.toml' if pkg.kind == 'cargo' else 'NEWS'}",
            "patching sources",
        ]
        if rng.random() < 0.4:
            patch = rng.choice(("fix-build-with-gcc-13", "disable-network-tests", "nix-store-paths", "CVE-2024-2511"))
            lines += [
                f"applying patch /nix/store/{ctx.drv.source[::-1]}-{patch}.patch",
                f"patching file {rng.choice(_C_FILES)}",
            ]
        if pkg.kind == "autotools":
            lines.append("updateAutotoolsGnuConfigScriptsPhase")
            lines.append("Updating Autotools / GNU config script to a newer upstream version: ./build-aux/config.sub")

    def _configure(self, ctx: _LogContext, lines: list[str], done: bool) -> None:
        rng, kind = self.rng, ctx.pkg.kind
        lines.append("configuring")
        if kind == "autotools":
            lines.append(f"configure flags: --disable-static --disable-dependency-tracking --prefix={ctx.out}")
            picks = sorted(rng.sample(range(len(_CONFIGURE_CHECKS)), rng.randint(8, 18)))
            lines += ["checking " + _CONFIGURE_CHECKS[i].format(deps=self.deps) for i in picks]
            lines += [
                "configure: creating ./config.status",
                "config.status: creating Makefile",
                "config.status: creating config.h",
                "config.status: executing depfiles commands",
            ]
        elif kind == "cmake":
            lines += [
                f"cmake flags: -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX={ctx.out} -GUnix Makefiles",
                "-- The C compiler identification is GNU 13.3.0",
                "-- The CXX compiler identification is GNU 13.3.0",
                "-- Detecting C compiler ABI info - done",
                f"-- Check for working C compiler: {self.deps['gcc-wrapper']}/bin/gcc - skipped",
                f'-- Found ZLIB: {self.deps["zlib"]}/lib/libz.so (found version "1.3.1")',
                "-- Performing Test HAVE_STDATOMIC - Success",
                f"-- Configuring done ({rng.uniform(0.4, 6):.1f}s)",
                f"-- Generating done ({rng.uniform(0.02, 0.6):.1f}s)",
                f"-- Build files have been written to: /build/{ctx.root}/build",
            ]
        elif kind == "meson":
            lines += [
                f"mesonConfigurePhase flags: --prefix={ctx.out} --buildtype=plain",
                "The Meson build system",
                "Version: 1.4.1",
                f"Source dir: /build/{ctx.root}",
                f"Build dir: /build/{ctx.root}/build",
                f"Project name: {ctx.pkg.pname}",
                f"Project version: {ctx.pkg.version}",
                'C compiler for the host machine: cc (gcc 13.3.0 "cc (GCC) 13.3.0")',
                f"Host machine cpu family: {ctx.arch}",
            ]
            lines += [
                f"Dependency {dep} found: \x1b[1;32mYES\x1b[0m {ver}"
                for dep, ver in rng.sample(
                    (
                        ("glib-2.0", "2.80.2"),
                        ("zlib", "1.3.1"),
                        ("libdrm", "2.4.120"),
                        ("libffi", "3.4.6"),
                        ("openssl", "3.0.14"),
                        ("libxml-2.0", "2.12.7"),
                    ),
                    3,
                )
            ]
            lines.append(f"Found ninja-1.12.1 at {self.deps['ninja']}/bin/ninja")
        elif kind == "cargo":
            lines += [
                "Executing cargoSetupPostPatchHook",
                f"Validating consistency between /build/{ctx.root}/Cargo.lock and /build/cargo-vendor-dir/Cargo.lock",
                "Finished cargoSetupPostPatchHook",
                "no configure script, doing nothing",
            ]
        elif kind == "node":
            lines += [
                "Executing npmConfigHook",
                "Configuring npm",
                f"Validating consistency between /build/{ctx.root}/package-lock.json and "
                f"/nix/store/{ctx.drv.source[::-1]}-{ctx.pkg.pname}-npm-deps/package-lock.json",
                "Installing dependencies",
                f"{_YELLOW}npm{_RESET} {_YELLOW}warn{_RESET} deprecated inflight@1.0.6: This module is not "
                "supported, and leaks memory.",
                f"added {rng.randint(300, 1500)} packages, and audited {rng.randint(300, 1500)} packages in "
                f"{rng.randint(4, 40)}s",
                "Finished npmConfigHook",
            ]
        elif kind == "haskell":
            lines += [
                f"Configuring {ctx.root}...",
                "Dependency base >=4.14 && <5: using base-4.18.2.1",
                "Dependency text >=2.0: using text-2.0.2",
                "Dependency containers: using containers-0.6.7",
            ]
        elif kind == "kernel":
            lines += [
                "  HOSTCC  scripts/basic/fixdep",
                "  HOSTCC  scripts/kconfig/conf.o",
                "#",
                "# configuration written to .config",
                "#",
            ]
        else:
            lines.append("no configure script, doing nothing")

    def _build(self, ctx: _LogContext, lines: list[str], done: bool) -> None:
        rng, kind = self.rng, ctx.pkg.kind
        count = rng.randint(6, 14) + min(18, int(math.log2(ctx.pkg.seconds)))
        lines.append("building")
        if kind in ("autotools", "make"):
            lines.append(f"build flags: -j{ctx.cpus} SHELL={self.deps['bash']}/bin/bash")
            for i in range(count):
                src = rng.choice(_C_FILES)
                obj = src[:-2] + ".o"
                if i % 6 == 0:
                    lines.append(f"make[1]: Entering directory '/build/{ctx.root}/{src.split('/')[0]}'")
                lines.append(
                    f"  CC       {obj}"
                    if rng.random() < 0.6
                    else f"gcc -DHAVE_CONFIG_H -I. -I./lib -I./include -O2 -Wall -c -o {obj} {src}"
                )
        elif kind == "cmake":
            lines.append(f"build flags: -j{ctx.cpus} SHELL={self.deps['bash']}/bin/bash")
            target = ctx.pkg.pname
            for i in range(count):
                pct = 100 * (i + 1) // (count + 1)
                src = rng.choice(_CXX_FILES if rng.random() < 0.5 else _C_FILES)
                lang = "CXX" if src.endswith("cpp") else "C"
                lines.append(f"[{pct:3d}%] {_GREEN}Building {lang} object CMakeFiles/{target}.dir/{src}.o{_RESET}")
            lines += [
                f"[ 99%] {_GREEN}{_BOLD}Linking CXX shared library lib{target}.so{_RESET}",
                f"[100%] Built target {target}",
            ]
        elif kind == "meson":
            lines.append(f"build flags: -j{ctx.cpus}")
            total = count * rng.randint(8, 30)
            for i in range(count):
                lines.append(
                    f"[{(i + 1) * total // count}/{total}] Compiling C object "
                    f"src/lib{ctx.pkg.pname}.so.p/{rng.choice(_C_FILES).rsplit('/', 1)[1]}.o"
                )
        elif kind == "cargo":
            lines.append(f"cargoBuildHook flags: --release --target {ctx.arch}-unknown-linux-gnu --offline")
            for crate in rng.sample(_CRATES, min(count, len(_CRATES))):
                lines.append(f"{_BOLD}{_GREEN}   Compiling{_RESET} {crate}")
            lines.append(f"{_BOLD}{_GREEN}   Compiling{_RESET} {ctx.pkg.pname} v{ctx.pkg.version} (/build/{ctx.root})")
            if done:
                lines.append(
                    f"{_BOLD}{_GREEN}    Finished{_RESET} `release` profile [optimized] target(s) in "
                    f"{int(ctx.duration * 0.8) // 60}m {int(ctx.duration * 0.8) % 60:02d}s"
                )
        elif kind == "go":
            lines.append(f"Building subPackage ./cmd/{ctx.pkg.pname}")
            lines += rng.sample(_GO_PACKAGES, min(count, len(_GO_PACKAGES)))
            lines.append(f"example.com/{ctx.pkg.pname}/internal/store")
        elif kind == "python":
            lines += [
                "Executing pypaBuildPhase",
                "Creating a wheel...",
                "* Getting build dependencies for wheel...",
                "* Building wheel...",
            ]
            module = ctx.pkg.pname.rsplit("-", 1)[-1].replace("-", "_")
            for name in rng.sample(_PY_MODULES, min(count, len(_PY_MODULES))):
                lines.append(f"copying {module}/{name}.py -> build/lib/{module}")
            lines += [
                f"Successfully built {module}-{ctx.pkg.version}-py3-none-any.whl",
                "Finished creating a wheel...",
                "Finished executing pypaBuildPhase",
            ]
        elif kind == "node":
            lines += [
                "Executing npmBuildHook",
                f"> {ctx.pkg.pname}@{ctx.pkg.version} build",
                "> vite build",
                f"\x1b[36mvite v5.3.1 {_GREEN}building for production...{_RESET}",
                "transforming...",
                f"{_GREEN}✓{_RESET} {rng.randint(200, 3000)} modules transformed.",
            ]
            for i in range(min(count, 8)):
                lines.append(f"dist/assets/index-{ctx.drv.source[i : i + 8]}.js  {rng.uniform(1, 900):8.2f} kB")
        elif kind == "haskell":
            total = count * rng.randint(3, 20)
            lines.append(f"Building library for {ctx.root}...")
            for i in range(count):
                module = rng.choice(_HS_MODULES)
                path = module.replace(".", "/")
                lines.append(
                    f"[{(i + 1) * total // count:3d} of {total}] Compiling {module:<32} "
                    f"( src/{path}.hs, dist/build/{path}.o, dist/build/{path}.dyn_o )"
                )
        else:  # kernel
            for _ in range(count):
                lines.append(f"  CC      {rng.choice(_KERNEL_FILES)}")
            if done:
                lines += [
                    "  AR      vmlinux.a",
                    "  LD      vmlinux.o",
                    "  OBJCOPY arch/x86/boot/vmlinux.bin",
                    "Kernel: arch/x86/boot/bzImage is ready  (#1)",
                ]

    def _check(self, ctx: _LogContext, lines: list[str], done: bool) -> None:
        rng, kind = self.rng, ctx.pkg.kind
        if kind in ("node", "kernel"):
            return  # these packages skip tests, as many nixpkgs packages do
        lines.append("running tests")
        count = rng.randint(4, 12)
        tests = rng.sample(_TEST_NAMES, count)
        if kind in ("autotools", "make", "meson"):
            lines.append(f"check flags: -j{ctx.cpus} SHELL={self.deps['bash']}/bin/bash VERBOSE=y check")
            lines += [f"{_GREEN}PASS{_RESET}: tests/{name}" for name in tests]
            if done:
                lines += [
                    "=" * 76,
                    f"# TOTAL: {count}",
                    f"# PASS:  {count}",
                    "# SKIP:  0",
                    "# XFAIL: 0",
                    "# FAIL:  0",
                    "# XPASS: 0",
                    "# ERROR: 0",
                    "=" * 76,
                ]
        elif kind == "cmake":
            lines.append(f"Test project /build/{ctx.root}/build")
            lines += [
                f"{i + 1:2d}/{count} Test #{i + 1:<2d} {name:.<36} {_GREEN}  Passed{_RESET}  "
                f"{rng.uniform(0.01, 3):.2f} sec"
                for i, name in enumerate(tests)
            ]
            if done:
                lines.append(f"100% tests passed, 0 tests failed out of {count}")
        elif kind == "cargo":
            lines += ["Executing cargoCheckHook", "", f"running {count} tests"]
            lines += [f"test tests::{name.replace('-', '_')} ... {_GREEN}ok{_RESET}" for name in tests]
            if done:
                lines.append(
                    f"test result: {_GREEN}ok{_RESET}. {count} passed; 0 failed; 0 ignored; 0 measured; "
                    f"0 filtered out; finished in {rng.uniform(0.01, 9):.2f}s"
                )
        elif kind == "python":
            lines += [
                "Executing pytestCheckPhase",
                "=" * 29 + " test session starts " + "=" * 30,
                "platform linux -- Python 3.11.9, pytest-8.2.2, pluggy-1.5.0",
                f"collected {count * 37} items",
                "",
            ]
            lines += [
                f"tests/test_{name.replace('-', '_')}.py {'.' * rng.randint(5, 40)} [{(i + 1) * 100 // count:3d}%]"
                for i, name in enumerate(tests)
            ]
            if done:
                lines.append(f"{_GREEN}{'=' * 20} {count * 37} passed in {rng.uniform(1, 90):.2f}s {'=' * 20}{_RESET}")
        elif kind == "haskell":
            lines += ["Running 1 test suites...", "Test suite spec: RUNNING..."]
            if done:
                lines += ["Test suite spec: PASS", "1 of 1 test suites (1 of 1 test cases) passed."]
        else:
            lines += [
                f"ok  \texample.com/{ctx.pkg.pname}/internal/{name}\t{rng.uniform(0.01, 3):.3f}s"
                for name in ("store", "api", "config")[: 3 if done else 1]
            ]

    def _install(self, ctx: _LogContext, lines: list[str], done: bool) -> None:
        lines.append("installing")
        if ctx.pkg.kind in ("autotools", "make"):
            lines += [
                f"install flags: -j{ctx.cpus} SHELL={self.deps['bash']}/bin/bash install",
                f" {self.deps['coreutils']}/bin/mkdir -p '{ctx.out}/bin'",
                f"{self.deps['coreutils']}/bin/install -c {ctx.pkg.pname} '{ctx.out}/bin'",
            ]
        elif ctx.pkg.kind == "cmake":
            lines += [
                '-- Install configuration: "Release"',
                f"-- Installing: {ctx.out}/bin/{ctx.pkg.pname}",
                f"-- Installing: {ctx.out}/lib/lib{ctx.pkg.pname}.so",
            ]
        elif ctx.pkg.kind == "python":
            lines += [
                "Executing pypaInstallPhase",
                f"Successfully installed {ctx.pkg.pname}-{ctx.pkg.version}",
                "Finished executing pypaInstallPhase",
            ]

    def _fixup(self, ctx: _LogContext, lines: list[str], done: bool) -> None:
        lines.append("post-installation fixup")
        for output, path, _, _ in ctx.drv.outputs:
            if ctx.linux and output in ("out", "bin", "lib"):  # only these hold ELF files
                lines += [
                    f"shrinking RPATHs of ELF executables and libraries in {path}",
                    f"shrinking {path}/bin/{ctx.pkg.pname}",
                ]
            lines += [
                f"checking for references to /build/ in {path}...",
                f"patching script interpreter paths in {path}",
                f"stripping (with command strip and flags -S -p) in  {path}/bin {path}/lib",
            ]

    def _failure(self, ctx: _LogContext, lines: list[str], in_tests: bool, message: str) -> None:
        rng, kind = self.rng, ctx.pkg.kind
        if in_tests:
            lines += self._test_failure(ctx)
        elif kind == "cargo":
            code, what = rng.choice(_RUST_ERRORS)
            file, line = rng.choice(_RUST_FILES), rng.randint(10, 600)
            lines += [
                f"{_BOLD}\x1b[91merror[{code}]{_RESET}{_BOLD}: {what}{_RESET}",
                f"   \x1b[94m-->{_RESET} {file}:{line}:{rng.randint(5, 40)}",
                "",
                f"{_BOLD}\x1b[91merror{_RESET}{_BOLD}: could not compile `{ctx.pkg.pname}` (bin "
                f'"{ctx.pkg.pname}") due to 1 previous error{_RESET}',
            ]
        elif kind == "go":
            lines += [
                f"# example.com/{ctx.pkg.pname}/internal/store",
                f"internal/store/orders.go:{rng.randint(20, 400)}:{rng.randint(2, 30)}: undefined: txOptions",
            ]
        elif kind == "node":
            file = rng.choice(_NODE_FILES)
            lines += [
                f"{_RED}error during build:{_RESET}",
                f"{file}({rng.randint(5, 300)},{rng.randint(3, 40)}): "
                "error TS2322: Type 'string' is not assignable to type 'number'.",
                "npm ERR! code 2",
            ]
        elif kind == "haskell":
            module = rng.choice(_HS_MODULES).replace(".", "/")
            lines += [
                f"src/{module}.hs:{rng.randint(20, 900)}:{rng.randint(3, 30)}: error: [GHC-83865]",
                "    \u2022 Couldn't match expected type \u2018Text\u2019 with actual type \u2018String\u2019",
            ]
        else:
            lines += self._c_error(ctx)
        lines.append(f"error: {message}")

    def _c_error(self, ctx: _LogContext) -> list[str]:
        rng = self.rng
        file = rng.choice(_C_FILES)
        error = _GCC_ERROR.format(
            file=file, line=rng.randint(20, 2000), col=rng.randint(3, 40), msg=rng.choice(_C_ERRORS)
        )
        lines = [f"{file}: In function 'parse_args':", error]
        if ctx.pkg.kind == "meson":
            return [
                f"FAILED: src/lib{ctx.pkg.pname}.so.p/{file.rsplit('/', 1)[1]}.o",
                *lines,
                "ninja: build stopped: subcommand failed.",
            ]
        return [
            *lines,
            f"make[2]: *** [Makefile:{rng.randint(300, 3000)}: {file[:-2]}.o] Error 1",
            f"make[1]: *** [Makefile:{rng.randint(300, 900)}: all-recursive] Error 1",
            f"make: *** [Makefile:{rng.randint(100, 300)}: all] Error 2",
        ]

    def _test_failure(self, ctx: _LogContext) -> list[str]:
        rng, kind = self.rng, ctx.pkg.kind
        name = rng.choice(_TEST_NAMES)
        if kind == "cargo":
            return [
                f"test tests::{name.replace('-', '_')} ... {_RED}FAILED{_RESET}",
                "",
                "failures:",
                "",
                f"---- tests::{name.replace('-', '_')} stdout ----",
                f"thread 'tests::{name.replace('-', '_')}' panicked at src/lib.rs:{rng.randint(10, 500)}:9:",
                "assertion `left == right` failed",
                "  left: 3",
                " right: 4",
                "",
                f"test result: {_RED}FAILED{_RESET}. 11 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out",
            ]
        if kind == "python":
            return [
                f"FAILED tests/test_{name.replace('-', '_')}.py::test_{name.replace('-', '_')} - "
                "AssertionError: assert 3 == 4",
                f"{_RED}{'=' * 10} 1 failed, {rng.randint(50, 900)} passed, 4 skipped in "
                f"{rng.uniform(2, 90):.2f}s {'=' * 10}{_RESET}",
            ]
        if kind == "cmake":
            return [
                f" 7/12 Test  #7: {name} ......................{_RED}***Failed{_RESET}    0.31 sec",
                "92% tests passed, 1 tests failed out of 12",
                "The following tests FAILED:",
                f"\t  7 - {name} (Failed)",
                "Errors while running CTest",
                f"make: *** [Makefile:{rng.randint(60, 200)}: test] Error 8",
            ]
        if kind == "haskell":
            return [
                "Test suite spec: FAIL",
                "Test suite logged to: dist/test/spec.log",
                "0 of 1 test suites (0 of 1 test cases) passed.",
            ]
        return [
            f"{_RED}FAIL{_RESET}: tests/{name}",
            "=" * 76,
            "# TOTAL: 24",
            "# PASS:  23",
            "# FAIL:  1",
            "=" * 76,
            "See tests/test-suite.log for debugging.",
            f"make[3]: *** [Makefile:{rng.randint(1000, 3000)}: test-suite.log] Error 1",
            f"make: *** [Makefile:{rng.randint(100, 300)}: check] Error 2",
        ]

    def _ending(self, ctx: _LogContext, lines: list[str], status: int, message: str | None) -> None:
        """How a build that neither succeeded nor failed on its own ends its log."""
        if status in (_OOM, _MAX_MEMORY):
            lines.append(_KILLED.get(ctx.pkg.kind, _KILLED["c"]).format(crate=ctx.pkg.pname.replace("-", "_")))
            lines.append(f"error: builder for '{ctx.drv.path}' failed due to signal 9 (Killed)")
        elif status in (_TIMEOUT, _INTERNAL, _CANCELLED, _DISCONNECT):
            lines.append(f"error: {message}")
        # A running build's log simply stops where it is now.


def _stable_hash(text: str) -> int:
    """A stable small hash (Python's own `hash` of str changes between runs)."""
    value = 0
    for char in text:
        value = (value * 131 + ord(char)) % 1_000_000_007
    return value


class _LogContext:
    """Facts about one build that the log templates need."""

    __slots__ = ("arch", "cpus", "drv", "duration", "linux", "out", "pkg", "root")

    def __init__(self, pkg: _Package, system: int, cpus: int, drv: _Drv, duration: float) -> None:
        self.pkg = pkg
        self.cpus = cpus
        self.drv = drv
        self.out = next(path for name, path, _, _ in drv.outputs if name == "out")
        # Projects and Rust/Go/npm packages come from git checkouts, the rest from release tarballs.
        from_git = pkg.kind in ("cargo", "go", "node") or pkg.weight >= 6
        self.root = "source" if from_git else f"{pkg.pname}-{pkg.version}"
        self.arch = _SYSTEMS[system][0].split("-")[0]
        self.linux = system < _LINUX_SYSTEMS
        self.duration = duration
