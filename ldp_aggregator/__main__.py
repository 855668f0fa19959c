"""python -m ldp_aggregator: the ldp-aggregator command line."""

from ldp_aggregator.entry import main

main()
