"""Locks, elections and fencing on coordination.k8s.io/v1 Leases, over the kube layer.

One async implementation (`TickLock`, `Elector`, `Grant`, `KeepAlive`), its sync front end
(`BackgroundLoop` + thin wrappers), and `lease_informer()`, the watch-fed cache that every
lock and elector of a process shares so that a replica which sees a live grant sends nothing.

This is the public home of the coordination primitives, for code that needs a lock or an
election of its own (`from leasecron.coordination import TickLock, LockConfig`); an application
that guards a function or runs a Scheduler needs none of them (`import leasecron`).
"""

from __future__ import annotations

from leasecron.coordination._views import LeaseCache, LeaseRecords, LeaseView
from leasecron.coordination.background import (
    BackgroundLoop,
    SyncElector,
    SyncGrant,
    SyncTickLock,
)
from leasecron.coordination.elections import Elector
from leasecron.coordination.grants import (
    Fence,
    Grant,
    KeepAlive,
    LostEvent,
    LostLockError,
    ReleaseResult,
    Term,
)
from leasecron.coordination.groups import (
    GroupRecord,
    ShardCountChange,
    ShardCountError,
    change_shard_count,
)
from leasecron.coordination.locks import Skipped, TickLock
from leasecron.coordination.resourcelocks import (
    LEASE_SELECTOR,
    ROLE_LEADER,
    LeaseLock,
    default_labels,
)
from leasecron.kube.clients import Kube
from leasecron.kube.leases import LeaseStore
from leasecron.kube.watches import Informer
from leasecron.models.clocks import SYSTEM_CLOCK, Clock
from leasecron.models.configs import ConfigError, ElectionConfig, LockConfig
from leasecron.models.identity import make_identity


def lease_informer(
    kube: Kube,
    *,
    namespace: str,
    label_selector: str = LEASE_SELECTOR,
    clock: Clock = SYSTEM_CLOCK,
) -> Informer:
    """The Informer (not started) on `namespace`'s election, shard, tick-lock and group-record
    Leases, to share between all TickLocks, ShardLocks, GroupRecords and Electors of a
    process."""
    path = LeaseStore(kube).collection_path(namespace=namespace)
    return Informer(kube, path=path, label_selector=label_selector, clock=clock)


__all__ = [
    "LEASE_SELECTOR",
    "ROLE_LEADER",
    "BackgroundLoop",
    "ConfigError",
    "ElectionConfig",
    "Elector",
    "Fence",
    "Grant",
    "GroupRecord",
    "KeepAlive",
    "LeaseCache",
    "LeaseLock",
    "LeaseRecords",
    "LeaseView",
    "LockConfig",
    "LostEvent",
    "LostLockError",
    "ReleaseResult",
    "ShardCountChange",
    "ShardCountError",
    "Skipped",
    "SyncElector",
    "SyncGrant",
    "SyncTickLock",
    "Term",
    "TickLock",
    "change_shard_count",
    "default_labels",
    "lease_informer",
    "make_identity",
]
