"""The composition root: settings, the command line, and the runtime that wires the layers together.

The only package that may import every other one.
"""
