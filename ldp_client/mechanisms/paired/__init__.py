"""Paired reports (association): two variables of one device randomized separately and sent together.

To estimate the joint distribution of two variables (Fanti, Pihur, Erlingsson, "Building a RAPPOR with
the Unknown", PETS 2016, §4: association between RAPPOR variables), the server must know which two
reports came from the same device. Storing a client identifier would link every report of a device; a
*paired report* links exactly the two values of one report instead: the device encodes both with their
own mechanisms (:class:`PairedParams`) and sends them in one message.

Each side is encoded exactly as in a campaign of its own mechanism whose id is
:func:`paired_side_id` ``(campaign_id, side)`` = ``"<id>/paired/first"`` or ``"<id>/paired/second"``: that id
keys RAPPOR's Bloom hashing and permanent randomized response (docs/rappor-encoding.md), so the two sides'
permanent responses are independent even when both sides report the same string. A string-RAPPOR side uses
the device's cohort from its client secret, so two string-RAPPOR sides with the same m share the cohort.
Privacy: one paired report reveals both sides, epsilon = first.epsilon + second.epsilon.

A side is one of the mechanisms the ``PairedSide`` oneof of the protos allows (rr, grr and the RAPPOR
variants); :data:`SIDE_SPECS` lists their specs, and the paired spec (:data:`SPEC`) does everything by
composing them: parameters, wire messages (each side's message is exactly the single campaign's, under
``paired.first`` / ``paired.second``, and errors name the side), journal rows (the first side's row, then the
second's), the accumulator (both sides' accumulators and, when both have few possible reports, the table of
their joint report patterns) and the server's per-report likelihoods.

Per-report encoding uses only the OS CSPRNG and the client secret (importing this module does not import
numpy); :func:`encode_batch_paired` is for simulation and takes an explicit ``numpy.random.Generator``.
"""

from ldp_client.mechanisms.paired.core import (
    MAX_JOINT_CELLS,
    PAIRED_SIDE_TYPES,
    SIDE_SPECS,
    SIDES,
    PairedColumns,
    PairedEncoder,
    PairedParams,
    PairedReport,
    PairedSide,
    encode_batch_paired,
    paired_side_id,
    side_spec,
)
from ldp_client.mechanisms.paired.spec import SPEC, PairedSpec

__all__ = [
    "MAX_JOINT_CELLS",
    "PAIRED_SIDE_TYPES",
    "SIDES",
    "SIDE_SPECS",
    "SPEC",
    "PairedColumns",
    "PairedEncoder",
    "PairedParams",
    "PairedReport",
    "PairedSide",
    "PairedSpec",
    "encode_batch_paired",
    "paired_side_id",
    "side_spec",
]
