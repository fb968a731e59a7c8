"""Alembic environment of the service database.

``Database.migrate`` (``kant.service.db.base``) hands its connection in ``config.attributes["connection"]``;
the ``alembic`` command line (for new revisions) uses the ``sqlalchemy.url`` option instead.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from kant.service.db.schema import metadata

config = context.config


def _run(connection: sa.Connection) -> None:
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
elif (given := config.attributes.get("connection")) is not None:
    _run(given)
else:
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("kant migrations run through Database.migrate() or with the sqlalchemy.url option")
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()
