"""The rooms of the live service's scheduling loop (:mod:`kant.service.loop` keeps the turn).

* :mod:`~kant.service.live.changes`: this turn's changes (rows, events, node updates, launches, stops,
  replies), written by the rooms, committed and acted on by the loop at the end of the turn;
* :mod:`~kant.service.live.state`: the live scheduler and the loop's books (nodes, tenants, active jobs,
  counters), and a job's transitions (arrive, start, evict, end, requeue, cancel);
* :mod:`~kant.service.live.nodes`: node operations (cordon, drain, fail, repair, remove, add; the
  executor's node events);
* :mod:`~kant.service.live.scaling`: an inference service's replicas;
* :mod:`~kant.service.live.compaction`: finished jobs leave memory;
* :mod:`~kant.service.live.view`: the view published after each turn (GAR, SOR, GFR, queue);
* :mod:`~kant.service.live.reads`: why a job waits, reasons, node views, the twin's snapshot.

Everything here runs on the loop's thread. The rooms import :mod:`~kant.service.live.state` and
:mod:`~kant.service.live.changes`, never the loop.
"""
