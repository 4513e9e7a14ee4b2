"""Benchmarks of turnkeeper (``make bench`` runs ``python -m bench``)."""
