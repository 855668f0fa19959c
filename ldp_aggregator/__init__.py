"""ldp_aggregator: durable gRPC aggregation of LDP reports into debiased estimates with intervals."""
