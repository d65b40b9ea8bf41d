"""The autotuner: an opt-in selection policy that chooses each kernel's setting by measuring.

``selection = "autotune"`` (``LAMINA_SELECTION=autotune``) loads it. A compile then takes each
kernel's setting from the tuning database (``database``) where it holds one, else the cost
model's; ``lamina tune`` (or a compile inside ``tuning.session()``) first measures the kernels the
database lacks on the GPU (``tuning``, ``measure``), and ``report`` says where the measurements
disagreed with the cost model.
"""
