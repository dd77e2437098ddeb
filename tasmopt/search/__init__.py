"""Block superoptimizer: finds cheaper verified TASM for straight-line blocks (issue 4)."""
