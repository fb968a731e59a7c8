"""The tree of queues a live service runs with, and an admin's changes to it.

At start the tree is the one an admin set through the API (kept in the database's ``meta`` table under
:data:`META_KEY`), else the one of ``kant serve --queues FILE``, else none. ``PUT /v1/queues/config``
validates a new tree with the queues file's model (:class:`~kant.plugins.queues.QueuesArgs`; a
mistake is a 422 naming the key), has the scheduling loop rebuild its scheduler under it (guarantees
that do not nest in the cluster's GPUs, or a GPU type the cluster lacks, are a 422 and change
nothing), then keeps it in the database: it applies from the next scheduling cycle and survives a
restart. ``DELETE /v1/queues/config`` forgets it (back to the file's tree, or none).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from kant.config.policy import Policy
from kant.config.validation import validate
from kant.errors import ConfigError
from kant.plugins.queues import QueuesArgs, load_queues, with_queues
from kant.service.db.database import Database
from kant.service.errors import Rejected
from kant.service.loop import ServiceLoop

__all__ = ["META_KEY", "QueuesConfig"]

log = logging.getLogger("kant.serve")

#: the meta key of the tree an admin set through the API (JSON: the queues file's shape)
META_KEY = "queues"


def _live(args: QueuesArgs, source: str) -> QueuesArgs:
    """``args`` as the live service runs them: a job no queue state could admit waits with the reason."""
    out = args.model_copy(update={"hold_over_max": True})
    out._source = source
    return out


class QueuesConfig:
    """The policy without queues (``base``), the file's tree, and the tree in force (``args``, from
    ``source``: ``api``, ``file`` or None)."""

    def __init__(self, base: Policy, file: str | None) -> None:
        self.base = base
        self.file_args = None if file is None else _live(load_queues(file), str(file))
        self.args: QueuesArgs | None = self.file_args
        self.source: str | None = None if file is None else "file"

    def policy(self) -> Policy:
        """The policy with the tree in force (the base policy without one)."""
        return self.base if self.args is None else with_queues(self.base, self.args)

    def load(self, db: Database) -> None:
        """Take the tree an admin set through the API, if the database keeps one (it wins over the file)."""
        raw = db.meta.get(META_KEY)
        if raw is None:
            return
        self.args = _live(validate(QueuesArgs, json.loads(raw), f"the database's queues (meta {META_KEY!r})"),
                          "the queues set through the API")
        self.source = "api"
        log.info("queues: the tree set through the API (the database's) is in force%s",
                 "; --queues FILE is not used" if self.file_args is not None else "")

    @staticmethod
    def parse(data: Any) -> QueuesArgs:
        """A queues document from a request's body, validated (:class:`Rejected` naming the key: 422)."""
        if not isinstance(data, dict):
            raise Rejected("", "the body must be a queues document: an object with 'queues'")
        try:
            args = validate(QueuesArgs, data, "body")
        except ConfigError as exc:
            raise Rejected(exc.path, exc.reason) from None
        return _live(args, "the queues set through the API")

    def set(self, db: Database, loop: ServiceLoop, args: QueuesArgs | None, source: str | None) -> None:
        """Put ``args`` in force: the loop rebuilds its scheduler under the new policy (a
        :class:`Rejected` if the tree does not fit the cluster; nothing changes then), then the database
        keeps the tree (``source`` api) or forgets it."""
        try:
            policy = self.base if args is None else with_queues(self.base, args)
        except ConfigError as exc:
            raise Rejected(exc.path, exc.reason) from None

        def apply(lp: ServiceLoop) -> None:
            lp.live.set_policy(policy, lp.clock.now())

        try:
            loop.call(apply, timeout=60.0)
        except ConfigError as exc:
            raise Rejected(exc.path or "queues", exc.reason) from None
        if source == "api" and args is not None:
            db.meta.set(META_KEY, json.dumps(document(args)))
        else:
            db.meta.delete(META_KEY)
        self.args, self.source = args, source

    def document(self) -> dict[str, Any]:
        """The tree in force as a queues file's JSON, with its source."""
        return {"source": self.source, **(document(self.args) if self.args is not None else {"queues": []})}


def document(args: QueuesArgs) -> dict[str, Any]:
    """``args`` as the queues file's JSON (what PUT takes): keys left out where they have their default."""
    out: dict[str, Any] = args.model_dump(mode="json", exclude_none=True, exclude={"hold_over_max"})

    def clean(q: dict[str, Any]) -> dict[str, Any]:
        if q.get("weight") == 1.0:
            del q["weight"]
        kids = q.get("children")
        if not kids:
            q.pop("children", None)
        else:
            q["children"] = [clean(c) for c in kids]
        return q

    out["queues"] = [clean(q) for q in out["queues"]]
    out.setdefault("fair_share", None)
    return out
