"""Serving: the live path of inference services (docs/inference.md, "Live").

- :mod:`.endpoints`: where each service's replicas listen and which of them take requests (the one
  registry the replicas' lifecycle writes and the request route reads);
- :mod:`.signals`: what the request route measures, as the live autoscaler reads it.
"""
