"""`python -m reconciler.cli`: the same command line as `reconciler`."""

from reconciler.cli import main

main()
