"""The contract between the roles and the devices (`docs/contract.md`): topic and key
names, payload parsing and validation, the records a parsed message becomes, the fast
parse of common payloads, and the weights blob's codec.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamlearn._lazy import exports

if TYPE_CHECKING:
    from streamlearn.contract.codec import decode, encode
    from streamlearn.contract.fastparse import FastSamples
    from streamlearn.contract.names import Names
    from streamlearn.contract.payloads import PayloadParser
    from streamlearn.contract.records import Observations, Parsed, Rejection, Request, Samples

__all__ = [
    "FastSamples",
    "Names",
    "Observations",
    "Parsed",
    "PayloadParser",
    "Rejection",
    "Request",
    "Samples",
    "decode",
    "encode",
]

__getattr__ = exports(
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
        "encode": "codec",
        "decode": "codec",
    },
)
