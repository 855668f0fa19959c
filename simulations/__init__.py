"""simulations: user populations through the same encoders, accumulators and estimators."""
