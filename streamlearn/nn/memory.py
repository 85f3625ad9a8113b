"""The memory head: a soft nearest-neighbour prediction from the most recent samples.

One more head for a hedge model (`hedge`), beside the linear head and the hidden layers'
heads: it reads the standardised inputs (head 0's tap) and predicts the targets of the
recent samples near them, weighted by a Gaussian kernel of the squared distance:

    w = softmax_j(-|q - k_j|^2 / tau),   prediction = sum_j w_j * v_j

over `size` slots of keys `k_j` (inputs) and values `v_j` (a class's probabilities, or the
standardised target). As |q|^2 is the same for every slot, the softmax's argument is
affine in q, `q @ kernel + bias` with kernel `2 k_j / tau` and bias `-|k_j|^2 / tau`; the
layer holds it in that form, so the head is a `Dense` with a softmax and a `Dense` without
a bias (`as_builtin`, for `export`), and the actors serve it as the learner scores it.

Its weights are not trained: the learner writes them in its spare time from the replay
buffer's newest samples, the bandwidth `tau` chosen there (`streamlearn.learner.memory`).
Until the first write every slot weighs alike and every value is the prior (`prior`), so
the head predicts it. A nearest-neighbour model is what River does best on the streams
whose concept is local (moving centroids, digits, small tables), and where the concept
changes it follows at once: the memory holds only what came since.

A training step computes the head only on the few rows of a live stream's batch (a
padded batch of at most `SCORED_ROWS` rows): there the step's logs (the served metric,
each head's loss for Hedge) hold the head as it serves. On a backlog's larger batches its
softmax over every slot for every row would cost a step ~10%: there it stands in as the
other heads' plain mean, with no gradient (the learner counts its loss as the worst
head's). Which of the two is fixed per batch size: on TensorFlow, whose trace covers every
size, by a condition that XLA (the learner's step is compiled with it: `networks`)
resolves when it compiles each bucket size, so no step pays for the test.
"""

from __future__ import annotations

from typing import Any

import keras

SCORED_ROWS = 64  # padded rows of a step that computes the head (a live stream's batch)


def computed_in_step(rows: Any) -> Any:
    """Whether a training step of `rows` padded rows (an int, or a traced scalar) computes
    the head, rather than its stand-in."""
    return rows <= SCORED_ROWS


@keras.saving.register_keras_serializable(package="streamlearn")
class Memory(keras.layers.Layer):
    """[(batch, inputs), the other heads (batch, heads, outputs)] -> (batch, 1, outputs):
    one head, stacked as the others are."""

    def __init__(self, size: int, outputs: int, prior: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.size = size
        self.outputs = outputs
        self.prior = prior

    def build(self, input_shape: Any) -> None:
        dim = int(input_shape[0][-1])
        const = keras.initializers.Constant
        self.kernel = self.add_weight((dim, self.size), "zeros", trainable=False, name="kernel")
        self.bias = self.add_weight((self.size,), "zeros", trainable=False, name="bias")
        self.values = self.add_weight(
            (self.size, self.outputs), const(self.prior), trainable=False, name="values"
        )

    def call(self, inputs, training=None):  # type: ignore[no-untyped-def]
        q, heads = inputs
        if not training:
            return self._read(q)
        standin = keras.ops.mean(keras.ops.stop_gradient(heads), axis=1, keepdims=True)
        rows = q.shape[0]
        if rows is not None:  # a trace of one batch size (JAX, PyTorch)
            return self._read(q) if computed_in_step(rows) else standin
        scored = computed_in_step(keras.ops.shape(q)[0])
        return keras.ops.cond(scored, lambda: self._read(q), lambda: standin)

    def _read(self, q):  # type: ignore[no-untyped-def]
        w = keras.ops.softmax(keras.ops.matmul(q, self.kernel) + self.bias, axis=-1)
        return keras.ops.expand_dims(keras.ops.matmul(w, self.values), 1)

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return (input_shape[0][0], 1, self.outputs)

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "size": self.size,
            "outputs": self.outputs,
            "prior": self.prior,
        }


def as_builtin(layer: Memory, inputs: list[Any]) -> Any:
    """What `layer` computes on `inputs` (inference), as built-in Keras layers holding its
    weights: the other heads are not read."""
    name, inputs = layer.name, inputs[0]
    weigh = keras.layers.Dense(layer.size, activation="softmax", name=f"{name}_weights")
    read = keras.layers.Dense(layer.outputs, use_bias=False, name=f"{name}_read")
    z = read(weigh(inputs))
    weigh.set_weights(
        [keras.ops.convert_to_numpy(layer.kernel), keras.ops.convert_to_numpy(layer.bias)]
    )
    read.set_weights([keras.ops.convert_to_numpy(layer.values)])
    return keras.layers.Reshape((1, layer.outputs), name=f"{name}_row")(z)


def find(model: keras.Model) -> Memory | None:
    return next((layer for layer in model.layers if isinstance(layer, Memory)), None)
