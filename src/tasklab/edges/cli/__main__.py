"""`python -m tasklab.edges.cli`."""

from tasklab.edges.cli import main

main()
