"""Triton VM: Goldilocks and extension fields, Tip5, the simulator, AET heights, equivalence."""

from tasmopt.vm.simulator import (
    ExternalCall,
    VmInput,
    VmResult,
    initial_stack,
    program_digest,
    run,
)
from tasmopt.vm.tables import TableHeights

__all__ = [
    "ExternalCall",
    "TableHeights",
    "VmInput",
    "VmResult",
    "initial_stack",
    "program_digest",
    "run",
]
