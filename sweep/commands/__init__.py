"""The ``sweep`` subcommands, a module per group; ``sweep/cli.py`` parses the arguments and
dispatches to them."""
