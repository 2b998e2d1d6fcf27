"""Services: the long-running processes next to the workers (etcd, NATS, generic sidecars).

``spec.resolve`` turns a recipe's ``services:`` list and the services its other sections
imply into ``ServiceSpec`` values (pure, validated, located errors); ``kinds`` holds what
each type supplies (command, ports, phase, readiness); ``desired/sources/services.py`` makes
them units that the plan places, gates, probes and relaunches like workers.
"""

from reconciler.desired.services.spec import PHASES, Discovery, Readiness, ServiceSpec, discovery_of, resolve

__all__ = ["PHASES", "Discovery", "Readiness", "ServiceSpec", "discovery_of", "resolve"]
