"""kant: a unified scheduler and trace-driven simulator for AI clusters."""

__version__ = "0.1.0"
