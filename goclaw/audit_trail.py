"""The append-only audit trail's services (docs/audit-integrity.md): the retention purge through the database's one
purge function, periodic checkpoints of every chain's head, and the verification of every chain and checkpoint.
Works on every ChainedRecord model, whichever app defines it (goclaw imports no app)."""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterator

from django.apps import apps
from django.db import connection, transaction
from django.utils import timezone

from goclaw.audit_chain import ZERO, audit_keys, canonical, digest, stamp, table_label
from goclaw.models import AuditCheckpoint, AuditPurge, ChainedRecord

# The checkpoints' own chain (one for the whole installation: a checkpoint is written under an advisory lock).
CHECKPOINT_CHAIN = uuid.UUID("6f1c2d0e-8a53-4c8e-9d3b-2a6f0c1e7b44")
_CHECKPOINT_LOCK = 0x60C1A3_A0D17  # pg_advisory_xact_lock key
# A checkpoint looks at rows created since the previous one, minus this: a row is committed a moment after its
# created_at (group commit, a caller's transaction), so rows committed late are still seen.
CHECKPOINT_SLACK = timedelta(minutes=2)


def chained_models() -> list[type[ChainedRecord]]:
    """Every append-only table, the purge and checkpoint records first (verification reads them before the rest)."""
    others = [m for m in apps.get_models() if issubclass(m, ChainedRecord) and m not in (AuditPurge, AuditCheckpoint)]
    return [AuditPurge, AuditCheckpoint, *sorted(others, key=table_label)]


def purgeable_models() -> list[type[ChainedRecord]]:
    """Every append-only table but the purge records (what verification needs to accept a purged chain front)."""
    return chained_models()[1:]


# --- retention -------------------------------------------------------------------------------------------
def audit_purge_batch(model: type[ChainedRecord], cutoff: datetime, max_rows: int) -> int:
    """Remove at most `max_rows` rows of `model` created before `cutoff` (the front of their chains) through the
    database's goclaw_audit_purge function, and record what went (a chained AuditPurge row) in the same
    transaction: verification accepts a chain that starts after its first row only where such a record says so."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT goclaw_audit_purge(%s::regclass, %s, %s)", [table_label(model), cutoff, max_rows])
            result = cursor.fetchone()[0]
        result = json.loads(result) if isinstance(result, str) else result
        if result["removed"]:
            AuditPurge(table=table_label(model), cutoff=cutoff, removed=result["removed"],
                       cut_chains=result["cut_chains"]).save()
    return result["removed"]


# --- checkpoints -------------------------------------------------------------------------------------------
def audit_checkpoint_write(now: datetime | None = None) -> AuditCheckpoint | None:
    """Record the head of every chain that changed since the previous checkpoint (None when nothing did). A chain
    cut short after its head was recorded (its last rows deleted) then fails verification."""
    now = now or timezone.now()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_CHECKPOINT_LOCK])
        last = AuditCheckpoint.objects.filter(chain=CHECKPOINT_CHAIN).order_by("-chain_seq").first()
        since = last.created_at - CHECKPOINT_SLACK if last else datetime(1970, 1, 1, tzinfo=now.tzinfo)
        known = last.heads if last else {}
        heads: dict[str, dict[str, list]] = {}
        for model in chained_models():
            if model is AuditCheckpoint:
                continue
            label = table_label(model)
            rows = (model.objects.filter(created_at__gte=since, chain__isnull=False).order_by("chain", "-chain_seq")
                    .distinct("chain").values_list("chain", "chain_seq", "chain_hash", "created_at", "pk"))
            changed = {str(chain): [seq, digest_hex, created.isoformat(), str(pk)]
                       for chain, seq, digest_hex, created, pk in rows
                       if known.get(label, {}).get(str(chain), [None, None])[:2] != [seq, digest_hex]}
            if changed:
                heads[label] = changed
        if not heads:
            return None
        checkpoint = AuditCheckpoint(heads=heads, window_start=since, created_at=now)
        seq, prev = (last.chain_seq + 1, bytes.fromhex(last.chain_hash)) if last else (0, ZERO)
        stamp(AuditCheckpoint, [checkpoint], CHECKPOINT_CHAIN, seq, prev, get=getattr, put=setattr)
        checkpoint.save()
    return checkpoint


# --- verification ------------------------------------------------------------------------------------------
@dataclass
class Problem:
    table: str
    row_id: str
    reason: str

    def __str__(self) -> str:
        return f"{self.table} row {self.row_id}: {self.reason}"


@dataclass
class VerifyReport:
    """What `audit_verify` found: per table its rows and chains, the problems (first one first), the latest
    checkpoint (worth copying somewhere the database cannot reach)."""

    tables: dict[str, dict[str, int]] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    checkpoints: int = 0
    latest_checkpoint: dict[str, Any] | None = None

    @property
    def intact(self) -> bool:
        return not self.problems


@dataclass
class _ChainState:
    key: bytes | None
    seq: int
    prev: bytes
    first_seq: int
    rows: int = 0


class _Verifier:
    def __init__(self, limit: int):
        self.report = VerifyReport()
        self.limit = limit
        self.keys = audit_keys()
        # (table, chain) -> {last removed seq: its hash}, from purge records that verified
        self.cuts: dict[tuple[str, str], dict[int, str]] = {}
        self.cut_cutoffs: dict[tuple[str, str], list[tuple[int, datetime]]] = {}  # … -> [(last removed seq, cutoff)]
        self.purge_cutoffs: dict[str, list[datetime]] = {}
        # (table, chain, seq) -> (hash, checkpoint seq), from checkpoints that verified
        self.expected: dict[tuple[str, str, int], tuple[str, int]] = {}
        self.heads: dict[tuple[str, str], tuple[int, int]] = {}  # (table, chain) -> (first seq, last seq)

    def problem(self, table: str, row_id: Any, reason: str) -> None:
        if len(self.report.problems) < self.limit:
            self.report.problems.append(Problem(table, str(row_id), reason))

    def walk(self, model: type[ChainedRecord]) -> Iterator[tuple[dict, bool]]:
        """Every row of `model` in chain order, with whether it verified."""
        label = table_label(model)
        names = [f.attname for f in model._meta.concrete_fields]
        pk = model._meta.pk.attname
        rows = chains = 0
        state: _ChainState | None = None
        current = None
        query = model.objects.order_by("chain", "chain_seq", pk).values(*names)
        for row in query.iterator(chunk_size=2000):
            rows += 1
            chain, seq, stored = row["chain"], row["chain_seq"], row["chain_hash"]
            if chain is None or seq is None or not stored:
                self.problem(label, row[pk], "it has no place in any chain: it was written outside goclaw (inserted out of band)")
                yield row, False
                continue
            if chain != current:
                current, chains = chain, chains + 1
                state = self._chain_start(label, row, pk)
            elif seq == state.seq - 1:
                self.problem(label, row[pk], f"a second row at place {seq} of chain {chain}: inserted out of band")
                yield row, False
                continue
            elif seq != state.seq:
                self.problem(label, row[pk], f"rows {state.seq}..{seq - 1} of chain {chain} before it are missing "
                                             f"(deleted)")
                state.seq, state.prev = seq, None
            ok = state.prev is not None and self._check(state, label, chain, seq, canonical(model, row), stored)
            if state.prev is not None and not ok:
                self.problem(label, row[pk], "its content does not match its hash: it was modified, or inserted out of band")
            state.seq, state.prev = seq + 1, _hex(stored)
            self.heads[(label, str(chain))] = (state.first_seq, seq)
            yield row, ok
        self.report.tables[label] = {"rows": rows, "chains": chains}

    def _chain_start(self, label: str, row: dict, pk: str) -> _ChainState:
        chain, seq = row["chain"], row["chain_seq"]
        if seq == 0:
            return _ChainState(None, 0, ZERO, 0)
        cut = self.cuts.get((label, str(chain)), {}).get(seq - 1)
        if cut is None:
            self.problem(label, row[pk], f"chain {chain} starts at place {seq}, but no retention purge removed the rows "
                                         f"before it (deleted)")
            return _ChainState(None, seq, None, seq)
        return _ChainState(None, seq, _hex(cut), seq)

    def _check(self, state: _ChainState, label: str, chain, seq: int, content: bytes, stored: str) -> bool:
        candidates = (state.key,) if state.key is not None else self.keys
        for key in candidates:
            if digest(key, state.prev, label, chain, seq, content).hex() == stored:
                state.key = key
                return True
        return False

    def run(self) -> VerifyReport:
        purges, checkpoints, *others = chained_models()
        found: dict[tuple[str, str, int], str] = {}  # hashes of the rows checkpoints recorded as heads
        label = table_label(purges)
        for row, ok in self.walk(purges):  # which chain fronts retention removed (only records that verify count)
            found[(label, str(row["chain"]), row["chain_seq"])] = row["chain_hash"]
            if ok:
                self.purge_cutoffs.setdefault(row["table"], []).append(row["cutoff"])
                for chain, (seq, digest_hex) in row["cut_chains"].items():
                    self.cuts.setdefault((row["table"], chain), {})[seq] = digest_hex
                    self.cut_cutoffs.setdefault((row["table"], chain), []).append((seq, row["cutoff"]))
        for row, ok in self.walk(checkpoints):  # the heads each chain had reached
            self.report.checkpoints += 1
            if ok and row["chain"] == CHECKPOINT_CHAIN:
                self.report.latest_checkpoint = {"seq": row["chain_seq"], "hash": row["chain_hash"],
                                                 "created_at": row["created_at"].isoformat()}
                for table, chains in row["heads"].items():
                    for chain, (seq, digest_hex, created, row_id) in chains.items():
                        self.expected[(table, chain, seq)] = (digest_hex, row["chain_seq"], created, row_id)
        for model in others:
            label = table_label(model)
            for row, _ in self.walk(model):
                key = (label, str(row["chain"]), row["chain_seq"])
                if key in self.expected:
                    found[key] = row["chain_hash"]
        self._check_heads(found)
        return self.report

    def _check_heads(self, found: dict) -> None:
        """Every head a checkpoint recorded is still there with its hash, or was removed by a retention purge."""
        for (table, chain, seq), (digest_hex, checkpoint_seq, created, row_id) in sorted(self.expected.items()):
            if (table, chain, seq) in found:
                if found[(table, chain, seq)] != digest_hex:
                    self.problem(table, row_id, f"checkpoint {checkpoint_seq} recorded another hash for this row "
                                                f"(the chain was rewritten)")
                continue
            first_last = self.heads.get((table, chain))
            if first_last is not None and first_last[0] > seq:
                # The front of the chain went with a retention purge, recorded as such; the purge takes rows by their
                # created_at, so this row must have been older than the cutoff of a purge that cut the chain past it
                # (else its created_at was changed to have retention take it early).
                if any(cut_seq >= seq and cutoff > datetime.fromisoformat(created)
                       for cut_seq, cutoff in self.cut_cutoffs.get((table, chain), ())):
                    continue
                self.problem(table, f"{chain}:{seq}", f"checkpoint {checkpoint_seq} recorded place {seq} of chain {chain} "
                                                      f"as created at {created}, but a retention purge with an older "
                                                      f"cutoff removed it (its created_at was changed: deleted early)")
                continue
            if first_last is None and any(cutoff > datetime.fromisoformat(created)
                                          for cutoff in self.purge_cutoffs.get(table, ())):
                continue  # the whole chain was old enough for a recorded purge
            where = f"it ends at place {first_last[1]}" if first_last else "none of its rows is left"
            self.problem(table, row_id, f"checkpoint {checkpoint_seq} recorded chain {chain} up to place {seq}, but "
                                        f"{where}: this row and any after it were deleted")


def _hex(text: str) -> bytes | None:
    """A stored hash as bytes (None if it is not one: a row tampered with)."""
    try:
        value = bytes.fromhex(text)
    except (TypeError, ValueError):
        return None
    return value if len(value) == 32 else None


def audit_verify(*, limit: int = 50) -> VerifyReport:
    """Walk every chain of every append-only table and the checkpoints; read-only. Problems name the first rows
    found broken (at most `limit`)."""
    return _Verifier(limit).run()
