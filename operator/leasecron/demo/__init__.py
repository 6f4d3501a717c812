"""The demo: a local control plane, three replicas of the example app, a live view."""
