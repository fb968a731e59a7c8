"""The FGD paper's GPU-sharing allocation experiment on the Alibaba openb trace, driven through the
core scheduler (its policies are core plugins: :mod:`kant.plugins.share_place`, ``fgd``,
``e-binpack``).

* :mod:`~kant.experiments.fgd.model`: inventory and pod list as columns;
* :mod:`~kant.experiments.fgd.run`: arrivals with inflation, never-fit pods, measures;
* :mod:`~kant.experiments.fgd.core`: the run loop on the core scheduler, policy name -> plugin;
* :mod:`~kant.experiments.fgd.report`: CSV, JSON, PNG and HTML outputs.
"""
