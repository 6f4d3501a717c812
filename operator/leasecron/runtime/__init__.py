"""The in-pod scheduler: handler registry, tick dispatch per bucket, membership."""
