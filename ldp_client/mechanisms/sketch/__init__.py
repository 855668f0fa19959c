"""Apple's count-mean sketch (``cms``) and Hadamard count-mean sketch (``hcms``): strings of any kind.

"Learning with Privacy at Scale" (Apple Differential Privacy Team, 2017). A device hashes its string into
one of k rows of width m (the hash functions are keyed by the campaign id, :mod:`.hashing`) and sends that
row's sketch vector with every sign flipped at random (cms: m signs) or one Hadamard coefficient of it
(hcms: one sign). The server estimates the counts of candidate strings given with the campaign or the
request, for domains far larger than a d-bit report allows (10^6 candidates, 64 rows of 1,024), with the
hash-collision term in the variance (:mod:`.base`). ``docs/sketches.md`` describes both for client authors.

Modules: :mod:`.hashing` (fingerprints, row keys, buckets; pure Python and numpy), :mod:`.base` (shared
parameters, spec, collision term, exact sampling of the bucket totals), :mod:`.cms` and :mod:`.hcms` (the
mechanisms and their specs, ``SPEC``). Importing the package does not import numpy.
"""

from ldp_client.mechanisms.sketch.cms import SPEC as CMS_SPEC
from ldp_client.mechanisms.sketch.cms import CMSEncoder, CMSParams, CMSReport
from ldp_client.mechanisms.sketch.hcms import SPEC as HCMS_SPEC
from ldp_client.mechanisms.sketch.hcms import HCMSEncoder, HCMSParams, HCMSReport

SPECS = (CMS_SPEC, HCMS_SPEC)
"""The two specs, in the order the registry lists them."""

__all__ = ["SPECS", "CMSEncoder", "CMSParams", "CMSReport", "HCMSEncoder", "HCMSParams", "HCMSReport"]
