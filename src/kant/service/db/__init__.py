"""The service's database, split by table group (import from the module that holds what you need).

- ``schema``: the SQLAlchemy tables, their metadata, states, lock keys, :data:`UNSET`.
- ``base``: :class:`Backend`: URL checks, the engine (SQLite pragmas, PostgreSQL options),
  transactions with the leader-epoch fence, ping, migrate, close, bulk inserts and updates.
- ``database``: :class:`Database`, a backend with one repository per table group (``db.jobs``,
  ``db.nodes``, ``db.tenants``, ``db.tokens``, ``db.services``, ``db.events``, ``db.meta``) and
  ``apply``, a loop turn's one write across tables.
- ``jobs`` (the job model: ``NewJob``, ``JobRow``, ``JobUpdate``), ``nodes``, ``tenants``,
  ``tokens``, ``services``, ``events``, ``meta``: each table group's rows and repository.
- ``leader``: :class:`LeaderLock`, leader election.
"""
