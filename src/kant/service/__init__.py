"""``kant serve``: the live scheduler service (database, scheduling loop, REST API)."""
