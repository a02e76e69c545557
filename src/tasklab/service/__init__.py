"""Services that run for as long as a worker or server lives."""
