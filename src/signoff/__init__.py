"""Signoff: a human review queue for machines."""

__version__ = "0.1.0"
__all__ = ["__version__"]
