"""Named inputs inside the model: missing values imputed, categorical inputs one-hot.

A named sample's missing input arrives as NaN and a categorical input as its value's index
(-1: a value not configured; `streamlearn.contract.named`). `Encode`, right after
`Standardize`, turns them into what the dense layers take: a missing number becomes 0, the
standardised mean (the running mean imputed), and each categorical column its one-hot
vector (all zeros for an unseen or missing value). It is part of the model, so the
learner, every actor and `export` compute the same function.
"""

from __future__ import annotations

from typing import Any

import keras


@keras.saving.register_keras_serializable(package="streamlearn")
class Encode(keras.layers.Layer):
    """NaN -> 0 in the numeric columns, then the categorical columns one-hot after them.

    `categories[i]` is how many values input i takes (0: a number).

    >>> import numpy as np
    >>> layer = Encode(categories=[0, 3, 0])
    >>> x = np.array([[1.5, 2, np.nan], [np.nan, -1, 4]], "float32")
    >>> keras.ops.convert_to_numpy(layer(x)).tolist()
    [[1.5, 0.0, 0.0, 0.0, 1.0], [0.0, 4.0, 0.0, 0.0, 0.0]]
    """

    def __init__(self, categories: list[int], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.categories = [int(k) for k in categories]
        self.numeric = [i for i, k in enumerate(self.categories) if k == 0]
        self.coded = [(i, k) for i, k in enumerate(self.categories) if k > 0]

    def call(self, x):
        ops = keras.ops
        parts = []
        if self.numeric:
            numbers = x if not self.coded else ops.take(x, self.numeric, axis=-1)
            parts.append(ops.where(ops.isnan(numbers), ops.zeros_like(numbers), numbers))
        for i, k in self.coded:
            column = x[..., i : i + 1]
            values = ops.arange(k, dtype=x.dtype)
            parts.append(ops.cast(ops.equal(column, values), x.dtype))
        return parts[0] if len(parts) == 1 else ops.concatenate(parts, axis=-1)

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        return (*input_shape[:-1], len(self.numeric) + sum(k for _, k in self.coded))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "categories": self.categories}
