"""The command-line client of ``kant serve`` (docs/cli.md): ``submit``, ``queue``, ``jobs``, ``show``,
``cancel``, ``why``, ``logs`` (:mod:`.jobs`), ``nodes``, ``drain``, ``cordon``, ``uncordon`` (:mod:`.nodes`),
``hold``, ``release``, ``update``, ``requeue`` (:mod:`.control`), ``top`` (:mod:`.top`) and ``whatif``
(:mod:`.whatif`); :mod:`.http` talks to the service and :mod:`.common`
holds what the commands share.

Each command makes a few requests to the REST API (``/v1``) with httpx and prints a rich table, or
the API's JSON with ``--json``. The service is ``KANT_URL`` (default http://127.0.0.1:8787) or
``--url``; the token is ``--token-file``, else ``KANT_TOKEN``, else ``./kant-admin.token`` (the file
``kant serve`` writes when no token was configured). Every failure, local or remote, is one line
``error: ...`` on stderr and exit status 2; the token is never printed. ``kant.cli.main`` imports each
module when one of its commands is first used.
"""
