"""python -m ldp_aggregator: the ldp-aggregator command line."""

from ldp_aggregator.cli import main

main()
