"""The learner role: micro-batches from the stream (`batching`) into guarded training
steps (`step`, `guard`, `replay`, `drift`), durable state (`durability`, `state`,
`checkpoint`) before acknowledgements (`writes`), variants and their promotion
(`variants`), status (`reporting`, `tensorboard`), the multi-host lockstep (`lockstep`,
`collective`), and `loop`, which runs them; `worker` is its process.
"""

from __future__ import annotations

from streamlearn._lazy import exports

__all__ = [
    "Batch",
    "Drainer",
    "Durability",
    "Learner",
    "LearnerWrites",
    "LockstepLearner",
    "Promoter",
    "Trainer",
]

__getattr__ = exports(
    __name__,
    {
        "Learner": "loop",
        "Trainer": "step",
        "Drainer": "batching",
        "Batch": "batching",
        "Promoter": "variants",
        "LockstepLearner": "lockstep",
        "LearnerWrites": "writes",
        "Durability": "durability",
    },
)
