"""The pure core: states, models, policies, registration, the task context.

Nothing in here imports a database driver, a server or an event loop.
"""
