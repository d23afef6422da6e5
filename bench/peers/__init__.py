"""Peer kernels measured beside qattn in the prefill benchmark (never part of the library)."""
