"""The hardware and the model as numbers: catalogs, memory budget, pass timing, and the
fixed-order arithmetic and hashes both simulators share."""
