"""SVIM: set-valued item and itemset mining (Wang, Li, Jha, S&P 2018), one stage per campaign.

:mod:`.core` holds the parameters and encoders, :mod:`.spec` the mechanism spec (``SPEC``).
"""
