"""The neural networks built from config: Keras models whose heads and layers are the
learning algorithms' (`streamlearn.online`), named fields encoded as a layer, and export
of a published version as a plain Keras file. Model code keeps to the public `keras` API
(TensorFlow, JAX or PyTorch underneath).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamlearn._lazy import exports

if TYPE_CHECKING:
    from streamlearn.nn.export import export
    from streamlearn.nn.networks import build_model


__all__, __getattr__ = exports(
    __name__,
    {
        "build_model": "networks",
        "export": "export",
    },
)
