"""The neural networks: Keras models built from config, input standardisation as a
layer, padded batch sizes, and export of a published version as a plain Keras file.
Model code keeps to the public `keras` API (TensorFlow, JAX or PyTorch underneath).
"""

from __future__ import annotations

from streamlearn._lazy import exports

__all__ = ["Standardize", "build_model", "export"]

__getattr__ = exports(
    __name__,
    {
        "build_model": "networks",
        "Standardize": "standardize",
        "export": "export",
    },
)
