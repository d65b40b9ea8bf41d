"""The plugin contract of lamina 0.1 as recorded when it shipped: hook names with their
arguments, and the methods each kind of provider is called through.

A later lamina may add hooks, hook arguments and provider methods; it may never
remove or rename what is listed here, or plugins written against it stop loading.
"""

HOOKS = {
    "lamina_register_ops": ("register",),
    "lamina_register_fusion_rules": ("register",),
    "lamina_register_schedules": ("register",),
    "lamina_register_kernel_passes": ("register",),
    "lamina_register_backends": ("register",),
    "lamina_register_targets": ("register",),
    "lamina_register_selection_policies": ("register",),
    "lamina_observe_ir": ("level", "ir", "compilation"),
}

PROVIDERS = {
    "FusionRule": {"name": None, "priority": None, "apply": ("program",)},
    "Schedule": {
        "name": None,
        "priority": None,
        "applies": ("kernel", "target"),
        "schedule": ("kernel", "target", "knobs"),
        "lower": ("tile", "target"),
    },
    "KernelPass": {"name": None, "priority": None, "apply": ("kernel", "target")},
    "SelectionPolicy": {"name": None, "choose": ("kernel", "candidates", "target")},
    "Backend": {"name": None, "available": (), "emit": ("program", "target"), "load": ("compilation", "target")},
}
