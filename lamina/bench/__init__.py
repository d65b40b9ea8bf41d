"""Measuring compiled programs the way PERFORMANCE.md prescribes."""
