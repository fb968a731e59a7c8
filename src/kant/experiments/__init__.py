"""Self-contained experiments that reproduce published results with kant's data and tooling.

* :mod:`kant.experiments.fgd`: the GPU-sharing placement experiment of the FGD paper (Weng et al.,
  "Beware of Fragmentation", USENIX ATC'23) on the Alibaba openb trace.
"""
