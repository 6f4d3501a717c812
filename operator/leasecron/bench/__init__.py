"""Benchmarks that print the figures of DESIGN.md section 8, against a real API server."""
