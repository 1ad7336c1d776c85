"""Questions answered by running the simulator many times, above the runner: capacity search
and fleets, calibration (fits) and validation against real runs."""
