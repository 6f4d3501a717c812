"""Locks, elections and fencing on coordination.k8s.io/v1 Leases, over the kube layer."""
