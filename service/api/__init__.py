"""HTTP routes and their injected dependencies."""
