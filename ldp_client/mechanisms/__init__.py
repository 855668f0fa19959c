"""On-device encoders: per-report (OS CSPRNG) and batch (seeded numpy Generator, for simulation)."""
