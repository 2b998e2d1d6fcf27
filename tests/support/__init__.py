"""What the test modules share: clients, recipes, clusters, stacks, gateways, autoscale setups.

A test module imports from here (or from helpers, harness, fakes), never from another test
module: tests/test_layers.py checks it. Fixtures are imported by name into the modules that use
them, as before (a fixture's own fixtures with it)."""
