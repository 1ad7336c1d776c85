"""The package version, written into every results file."""
__version__ = "0.1.0"  # kept equal to pyproject.toml's
