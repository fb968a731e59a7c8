"""The FGD paper's GPU-sharing allocation experiment on the Alibaba openb trace.

* :mod:`~kant.experiments.fgd.model`: inventory, pod list, per-GPU free state;
* :mod:`~kant.experiments.fgd.policies`: random, best-fit, dot-product, gpu-packing,
  gpu-clustering, fgd, e-binpack;
* :mod:`~kant.experiments.fgd.run`: arrivals with inflation, the run loop, measures;
* :mod:`~kant.experiments.fgd.report`: CSV, JSON, PNG and HTML outputs.
"""
