"""The control plane's workflows, one owner each, called by HTTP, the NATS gateway and the
dashboard alike; each asks the actors that own the state it touches."""

from lakeshore.services.fleet import FleetService
from lakeshore.services.jobs import Cancelled, JobService
from lakeshore.services.queues import QueueService, Removed
from lakeshore.services.wiring import Services

__all__ = ["Cancelled", "FleetService", "JobService", "QueueService", "Removed", "Services"]
