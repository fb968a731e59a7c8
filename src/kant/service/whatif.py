"""A what-if of the live cluster (``POST /v1/whatif``, docs/whatif.md): the request's scenarios made
into the twin's :class:`Scenario` objects (a bad one is refused, naming its field), then run in the
twin's what-if worker through the :class:`WhatIfGate` (one request per tenant or admin token at a
time, a few in all: more is :class:`Busy`; each within the service's budget)."""

from __future__ import annotations

import logging
from typing import Any

from kant.config.policy import bundled_policies, load_policy, parse_policy
from kant.errors import ConfigError
from kant.service.errors import Rejected, TooLong
from kant.service.schemas import WhatIfIn
from kant.service.twin import Twin, WhatIfGate
from kant.twin.whatif import NodeTemplate, Scenario

__all__ = ["run_whatif", "scenarios"]

log = logging.getLogger("kant.serve")


def scenarios(body: WhatIfIn) -> list[Scenario]:
    """The request's scenarios; a policy that is neither bundled nor valid is :class:`Rejected`."""
    out = []
    bundled = bundled_policies()
    for i, sc in enumerate(body.scenarios):
        where = f"scenarios.{i}"
        policy = None
        if isinstance(sc.policy, str):
            if sc.policy not in bundled:
                raise Rejected(f"{where}.policy", f"no bundled policy {sc.policy!r}; bundled: "
                                                  f"{', '.join(sorted(bundled))}")
            policy = load_policy(sc.policy)
        elif sc.policy is not None:
            try:
                policy = parse_policy(sc.policy, f"{where}.policy")
            except ConfigError as exc:
                raise Rejected("", str(exc)) from None
        node = None if sc.node is None else NodeTemplate(sc.node.gpu_type, sc.node.gpus, sc.node.cpu_milli,
                                                         sc.node.memory_mib)
        out.append(Scenario(sc.name, policy, sc.add_nodes, node, tuple(sc.drain),
                            {t: (q.guaranteed, q.max) for t, q in sc.quotas.items()}))
    return out


def run_whatif(twin: Twin, gate: WhatIfGate, body: WhatIfIn, *, html: bool, who: str) -> dict[str, Any]:
    """Run the live state forward as it is and under ``body``'s scenarios (the twin's worker process),
    for ``who`` (a tenant or an admin token: one request at a time each). A request that cannot
    finish one run of each scenario within the gate's hard limit is :class:`Rejected`; one the gate
    turns away is :class:`~kant.service.errors.Busy`."""
    wanted = scenarios(body)
    try:
        with gate.admit(who):
            out = twin.whatif(wanted, horizon_s=body.horizon_h * 3600.0, runs=body.runs, html=html,
                              budget_s=gate.budget_s, hard_limit_s=gate.hard_limit_s(),
                              arrivals=body.arrivals == "history")
    except TooLong:
        log.warning("a what-if of %s was stopped after %g s without one run of each scenario", who,
                    gate.hard_limit_s())
        raise Rejected("horizon_h, scenarios", f"not one run of each scenario finished within "
                                               f"{gate.hard_limit_s():g} s (twice this service's what-if budget of "
                                               f"{gate.budget_s:g} s, kant serve --whatif-budget): ask for a shorter "
                                               "horizon_h, fewer scenarios or fewer add_nodes") from None
    if "error" in out:
        raise Rejected("", str(out["error"]))
    return out
