"""The neural networks: Keras models built from config, input standardisation as a
layer, padded batch sizes, the compiled forward pass, and export of a published version
as a plain Keras file. Model code keeps to the public `keras` API (TensorFlow, JAX or
PyTorch underneath).
"""

from __future__ import annotations

from streamlearn._lazy import exports

__all__ = ["Forward", "Standardize", "build_model", "export"]

__getattr__ = exports(
    __name__,
    {
        "build_model": "networks",
        "Forward": "forward",
        "Standardize": "standardize",
        "export": "export",
    },
)
