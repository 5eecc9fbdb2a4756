"""Tooling for the book itself (site build, exercises), not for RL. The RL code is in minirl/*.py."""
