"""moecert.kernels: production backends, their weight conversion, and the selection oracle.

    from moecert.kernels import (Backend, Platform, backend_names, claim_subset,
                                 get_backend, register_backend, select_backend)
"""

from .delegate import DelegatingBackend, claim_subset
from .errors import BackendError, NoBackendError, UnsupportedError
from .layer import MoELayer
from .oracle import Selection, select_backend
from .platform import Platform
from .protocol import Backend, CanonicalExport, DescribesLayer, ExportedLinear
from .quant_config import QuantConfig, Variant
from .registry import backend_names, get_backend, register_backend

__all__ = ["Backend", "BackendError", "CanonicalExport", "DelegatingBackend", "DescribesLayer",
           "ExportedLinear", "MoELayer", "NoBackendError", "Platform", "QuantConfig", "Selection",
           "UnsupportedError", "Variant", "backend_names", "claim_subset", "get_backend",
           "register_backend", "select_backend"]
