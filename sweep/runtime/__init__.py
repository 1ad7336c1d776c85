"""The ground floor every room may use: the compiled executables kept across runs."""
