"""The experiment: the sweep over a scenario's points (``sweep``), one run (``execute``) with its
dynamics (``dynamics``, ``events``, ``clock``, ``flows``), its ranks (``ranks``, ``workloads``),
its metrics (``run_metrics``) and its results directory (``results``)."""
