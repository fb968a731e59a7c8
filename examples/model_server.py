"""The example model server (docs/inference.md, "The example model server"): a small real ASGI
server doing real CPU work per token, with a readiness path. Its code is :mod:`kant.model_server`
(shipped in the package, so ``python -m kant.model_server`` runs it where kant is installed); this
file runs it from a checkout:

    PORT=9000 python examples/model_server.py --ms-per-token 0.5 --warmup 5
    curl -s localhost:9000/v1/completions -d '{"max_tokens": 64, "prompt_tokens": 100}'
"""

from kant.model_server import main

if __name__ == "__main__":
    main()
