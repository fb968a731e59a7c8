"""Discrete-event simulation of a cluster driven by a trace."""

from kant.sim.execution import ExecutionModel
from kant.sim.kernel import EventKernel
from kant.sim.simulator import NodeFailure, Simulator, simulate

__all__ = ["EventKernel", "ExecutionModel", "NodeFailure", "Simulator", "simulate"]
