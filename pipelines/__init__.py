"""Workflows users run, and the ``vision`` command line that drives them.

Heavy dependencies (diffusers) are imported lazily by the modules that need them.
"""
