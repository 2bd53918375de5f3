"""Harness for the KunlunXIN copy_ overlay: emulation, demo, benchmark and export tooling.

Not part of the upstream PR.
"""
