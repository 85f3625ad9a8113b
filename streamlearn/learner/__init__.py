"""The learner role: micro-batches drained from the stream (`batching`) into the
trainer (`streamlearn.online`, built from config by `step`), durable state (`durability`,
`state`) before acknowledgements (`writes`), variants and their promotion (`variants`),
status (`reporting`, `tensorboard`), the multi-host lockstep (`lockstep`, `collective`),
and `loop`, which runs them; `worker` is its process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamlearn._lazy import exports

if TYPE_CHECKING:
    from streamlearn.learner.batching import Drainer
    from streamlearn.learner.durability import Durability
    from streamlearn.learner.lockstep import LockstepLearner
    from streamlearn.learner.loop import Learner
    from streamlearn.learner.variants import Promoter
    from streamlearn.learner.writes import LearnerWrites


__all__, __getattr__ = exports(
    __name__,
    {
        "Learner": "loop",
        "Drainer": "batching",
        "Promoter": "variants",
        "LockstepLearner": "lockstep",
        "LearnerWrites": "writes",
        "Durability": "durability",
    },
)
