"""Bundled inputs for the demo and the tests. Every file here names its source and licence in SOURCES.md."""
