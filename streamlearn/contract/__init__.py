"""The contract between the roles and the devices (`docs/contract.md`): topic and key
names, payload parsing and validation, the records a parsed message becomes, and the fast
parse of common payloads (the weights blob's codec is `streamlearn.online.codec`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamlearn._lazy import exports

if TYPE_CHECKING:
    from streamlearn.contract.fastparse import FastSamples
    from streamlearn.contract.names import Names
    from streamlearn.contract.payloads import PayloadParser
    from streamlearn.contract.records import Observations, Parsed, Rejection, Request, Samples


__all__, __getattr__ = exports(
    __name__,
    {
        "Names": "names",
        "PayloadParser": "payloads",
        "Samples": "records",
        "Observations": "records",
        "Request": "records",
        "Rejection": "records",
        "Parsed": "records",
        "FastSamples": "fastparse",
    },
)
