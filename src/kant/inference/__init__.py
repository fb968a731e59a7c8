"""Inference services next to training: services files, traffic, autoscaling, SLOs, co-scheduling.

* :mod:`kant.inference.services`: the services YAML (validated; impossible services rejected);
* :mod:`kant.inference.traffic`: load traces binned and stretched over a simulation (seeded);
* :mod:`kant.inference.autoscaler`: a Kubernetes-HPA autoscaler;
* :mod:`kant.inference.slo`: the M/M/c (Erlang C) SLO model;
* :mod:`kant.inference.replicas`: which replicas go first when a service scales down (simulated and live);
* :mod:`kant.inference.unified`: the driver that runs services in the simulator and reports them.

See ``docs/inference.md``.
"""

from kant.inference.services import ServicesConfig, ServiceSpec, load_services, parse_services

__all__ = ["ServiceSpec", "ServicesConfig", "load_services", "parse_services"]
