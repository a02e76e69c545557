"""Built-in tasks, registered on every TaskApp."""
