"""What to simulate: a config's grid of designs and workloads, read and checked."""
