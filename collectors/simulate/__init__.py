"""The built-in fleet simulator: a whole fleet's power, requests and training events without a GPU."""

from collectors.simulate.arrivals import Arrivals, diurnal_rate_rps
from collectors.simulate.simulator import SimulationSummary, simulate

__all__ = ["Arrivals", "SimulationSummary", "diurnal_rate_rps", "simulate"]
