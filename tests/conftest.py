"""Shared test configuration. The cluster fixtures (`controlplane`, `kube_api`, `namespace`,
`serviceaccount_client`, ...) come from the `leasecron.testing.pytest_plugin` plugin, enabled
by `-p leasecron.testing.pytest_plugin` in pyproject.toml's addopts; see its module docstring.
Keep this file small."""
