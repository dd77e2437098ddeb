"""Triton VM: Goldilocks and extension fields, Tip5, the simulator, AET heights, equivalence."""
