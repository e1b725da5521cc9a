"""Namespace, dtype/device and validation helpers shared by the public modules.

This package is the only importer of ``array_api_compat``; everything else asks it.
"""
from ._arrays import as_positions, check_device, check_finite_range, output_dtype
from ._namespace import (
    array_namespace,
    backend_name,
    default_float,
    device_of,
    dtype_kind,
    has_float64,
    is_lazy,
    is_writeable,
    namespace_for,
    to_numpy,
)
from ._validate import (
    check_choice,
    check_dtype_arg,
    check_positive_int,
    check_real_array,
    check_real_scalar,
    check_even_dim,
)

__all__ = [
    "as_positions",
    "check_device",
    "check_finite_range",
    "output_dtype",
    "array_namespace",
    "backend_name",
    "check_choice",
    "check_dtype_arg",
    "check_even_dim",
    "check_positive_int",
    "check_real_array",
    "check_real_scalar",
    "default_float",
    "dtype_kind",
    "device_of",
    "has_float64",
    "is_lazy",
    "is_writeable",
    "namespace_for",
    "to_numpy",
]
