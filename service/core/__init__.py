"""Settings and database plumbing of the service."""
