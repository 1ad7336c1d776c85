"""How simulations run: batches to the engine on every device and process, compiled once."""
