"""JSON schema for matrix.yml: the shape of the file, checked before any rule runs."""

from typing import Any

_VERSION = {"type": "string", "pattern": r"^\d+(\.\d+)*$"}
_DIGEST = {"type": ["string", "null"], "pattern": r"^sha256:[0-9a-f]{64}$"}
_IMAGE = {
    "type": "object",
    "required": ["repository", "tag", "digest"],
    "additionalProperties": False,
    "properties": {
        "repository": {"type": "string", "minLength": 1},
        "tag": {"type": "string", "minLength": 1, "not": {"const": "latest"}},
        "digest": _DIGEST,
    },
}
_PACKAGES = {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}
_PIN = {"type": "string", "pattern": r"^\d+(\.\d+)+$"}
_MINOR = {"type": "string", "pattern": r"^\d+\.\d+$"}
_DRIVER = {"type": "string", "pattern": r"^\d{3}\.\d+(\.\d+)?$"}
_ARCHITECTURES = {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"type": "string"}}
# A kernel flavour as the kernel release ends (6.1.0-27-cloud-amd64 -> cloud-amd64) -> its headers metapackage.
_FLAVOURS = {
    "type": "object",
    "propertyNames": {"pattern": r"^[a-z0-9][a-z0-9-]*$"},
    "additionalProperties": {"type": "string", "pattern": r"^[a-z0-9][a-z0-9.+-]*$"},
}
_KERNEL_HEADERS = {
    "type": "object",
    "minProperties": 1,
    "additionalProperties": {
        "type": "object",
        "minProperties": 1,
        "additionalProperties": {
            "type": "object",
            "required": ["series", "flavours"],
            "additionalProperties": False,
            "properties": {
                "series": _MINOR,
                "flavours": {**_FLAVOURS, "minProperties": 1},
                "hwe_flavours": _FLAVOURS,
            },
        },
    },
}
_BRANCHES = {
    "type": "object",
    "minProperties": 1,
    "propertyNames": {"pattern": r"^\d{3}$"},
    "additionalProperties": {
        "type": "object",
        "required": ["kind", "end_of_life"],
        "additionalProperties": False,
        "properties": {
            "kind": {"enum": ["lts", "production", "new_feature"]},
            # YYYY-MM: supported through the end of that month, as NVIDIA publishes it; "ended": NVIDIA
            # lists the branch as end of life without a date; null: a new feature branch (no date).
            "end_of_life": {
                "oneOf": [
                    {"type": "string", "pattern": r"^\d{4}-(0[1-9]|1[0-2])$"},
                    {"const": "ended"},
                    {"type": "null"},
                ]
            },
        },
    },
}
_SERVING_LAB = {
    "type": "object",
    "required": ["triton", "python_packages", "debian_packages"],
    "additionalProperties": False,
    "properties": {
        "triton": {
            "type": "object",
            "required": ["wheel", "wheel_version", "server_version", "release"],
            "additionalProperties": False,
            "properties": {
                "wheel": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]*$"},
                "wheel_version": _PIN,
                "server_version": _PIN,
                "release": {"type": "string", "pattern": r"^\d{2}\.\d{2}$"},
            },
        },
        "python_packages": {
            "type": "object",
            "required": ["tritonclient", "onnxruntime", "numpy", "nvidia-cuda-runtime-cu12"],
            "additionalProperties": _PIN,
        },
        "debian_packages": {
            "type": "object",
            "required": ["prometheus", "prometheus-alertmanager"],
            "additionalProperties": _MINOR,
        },
    },
}

_CONTAINER_BASE = {
    "type": "object",
    "required": ["suite", "debian_version", "packages", "python_version", "python_package_minimum"],
    "additionalProperties": False,
    "properties": {
        "suite": {"type": "string", "pattern": r"^[a-z]+$"},
        "debian_version": {"type": "string", "pattern": r"^\d+$"},
        "packages": {**_PACKAGES, "contains": {"const": "python3"}},
        "python_version": _PIN,
        # A full Debian package version: upstream version, revision and any +debNNuN suffix.
        "python_package_minimum": {"type": "string", "pattern": r"^\d+(\.\d+)+-[0-9A-Za-z.+~]+$"},
    },
}

MATRIX_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [
        "schema_version",
        "kubernetes",
        "nvidia_driver",
        "container_toolkit",
        "containerd",
        "triton",
        "images",
        "charts",
        "gpu_products",
        "kernel_modules",
        "operating_systems",
        "kernel_headers",
        "serving_lab",
        "container_base",
    ],
    "additionalProperties": False,
    "properties": {
        "schema_version": {"const": 1},
        "kubernetes": {
            "type": "object",
            "required": ["version", "supported_minors"],
            "additionalProperties": False,
            "properties": {
                "version": _VERSION,
                "supported_minors": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": "string", "pattern": r"^\d+\.\d+$"},
                },
            },
        },
        "nvidia_driver": {
            "type": "object",
            "required": ["version", "kernel_module", "branches", "sources", "upgrade_blacklist"],
            "additionalProperties": False,
            "properties": {
                "version": _DRIVER,
                "kernel_module": {"enum": ["open", "proprietary"]},
                "sources": {
                    "type": "object",
                    "minProperties": 1,
                    "additionalProperties": {
                        "type": "object",
                        "required": [
                            "description",
                            "package_version",
                            "userspace_packages",
                            "kernel_packages",
                        ],
                        "additionalProperties": False,
                        "properties": {
                            "description": {"type": "string"},
                            # Only where the source cannot package the fleet pin (Debian 12: R535).
                            "version": _DRIVER,
                            "package_version": {"type": "string", "minLength": 1},
                            "userspace_packages": _PACKAGES,
                            "persistence_package": {"type": "string", "minLength": 1},
                            "kernel_packages": {
                                "type": "object",
                                "required": ["open", "proprietary"],
                                "additionalProperties": False,
                                "properties": {"open": _PACKAGES, "proprietary": _PACKAGES},
                            },
                            "fabricmanager_package": {"type": "string", "minLength": 1},
                            "fabricmanager_package_version": {"type": "string", "minLength": 1},
                            "dnf_module": {
                                "type": "object",
                                "required": ["name", "streams"],
                                "additionalProperties": False,
                                "properties": {
                                    "name": {"type": "string", "minLength": 1},
                                    "streams": {
                                        "type": "object",
                                        "required": ["open", "proprietary"],
                                        "additionalProperties": False,
                                        "properties": {
                                            "open": {"type": "string", "pattern": r"^\d{3}-[a-z]+$"},
                                            "proprietary": {"type": "string", "pattern": r"^\d{3}-[a-z]+$"},
                                        },
                                    },
                                },
                            },
                        },
                        "dependentRequired": {
                            "fabricmanager_package": ["fabricmanager_package_version"],
                            "fabricmanager_package_version": ["fabricmanager_package"],
                        },
                    },
                },
                "branches": _BRANCHES,
                "upgrade_blacklist": _PACKAGES,
            },
        },
        "container_toolkit": {
            "type": "object",
            "required": ["version", "min_version", "min_version_cgroup_v2"],
            "additionalProperties": False,
            "properties": {
                "version": _VERSION,
                "min_version": _VERSION,
                "min_version_cgroup_v2": _VERSION,
            },
        },
        "containerd": {
            "type": "object",
            "required": ["package", "min_version"],
            "additionalProperties": False,
            "properties": {"package": {"type": "string"}, "min_version": _VERSION},
        },
        "triton": {
            "type": "object",
            "required": ["default_release", "image", "image_suffix", "releases"],
            "additionalProperties": False,
            "properties": {
                "default_release": {"type": "string"},
                "image": {"type": "string", "minLength": 1},
                "image_suffix": {"type": "string"},
                "releases": {
                    "type": "object",
                    "minProperties": 1,
                    "propertyNames": {"pattern": r"^\d{2}\.\d{2}$"},
                    "additionalProperties": {
                        "type": "object",
                        "required": [
                            "server_version",
                            "cuda",
                            "min_driver_branch",
                            "forward_compat",
                            "min_compute_capability",
                            "architectures",
                            "digest",
                        ],
                        "additionalProperties": False,
                        "properties": {
                            "server_version": _PIN,
                            "cuda": _VERSION,
                            "min_driver_branch": {"type": "integer", "minimum": 400},
                            "min_compute_capability": _MINOR,
                            "architectures": _ARCHITECTURES,
                            "forward_compat": {"type": "array", "items": _VERSION},
                            "digest": _DIGEST,
                        },
                    },
                },
            },
        },
        "images": {"type": "object", "minProperties": 1, "additionalProperties": _IMAGE},
        "charts": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["repository", "version"],
                "additionalProperties": False,
                "properties": {
                    "repository": {"type": "string", "pattern": r"^(https|oci)://"},
                    "chart": {"type": "string"},
                    "version": {"type": "string", "pattern": r"^\d+\.\d+\.\d+$"},
                },
            },
        },
        "gpu_products": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["architecture", "compute_capability", "datacenter", "mig"],
                "additionalProperties": False,
                "properties": {
                    "architecture": {"type": "string"},
                    "compute_capability": _MINOR,
                    "datacenter": {"type": "boolean"},
                    "mig": {"type": "boolean"},
                    "min_driver": _DRIVER,
                    # false: never needs NVIDIA Fabric Manager; {min_gpus: 8}: nodes with that many of
                    # them are NVSwitch baseboards and need it. Absent: unknown, preflight refuses the product.
                    "fabric_manager": {
                        "oneOf": [
                            {"const": False},
                            {
                                "type": "object",
                                "required": ["min_gpus"],
                                "additionalProperties": False,
                                "properties": {"min_gpus": {"type": "integer", "minimum": 2}},
                            },
                        ]
                    },
                },
            },
        },
        "kernel_modules": {
            "type": "object",
            "additionalProperties": {
                "type": "array",
                "minItems": 1,
                "uniqueItems": True,
                "items": {"enum": ["open", "proprietary"]},
            },
        },
        "operating_systems": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["versions", "package_manager", "driver_source"],
                "additionalProperties": False,
                "properties": {
                    "versions": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                    "package_manager": {"enum": ["apt", "dnf"]},
                    "driver_source": {"type": "string"},
                },
            },
        },
        "kernel_headers": _KERNEL_HEADERS,
        "serving_lab": _SERVING_LAB,
        "container_base": _CONTAINER_BASE,
    },
}
