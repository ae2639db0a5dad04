"""Training workflows as library functions (the command line only parses arguments into them)."""
