"""Shared test configuration. The cluster fixtures (`controlplane`, `kube_api`, `namespace`,
`serviceaccount_client`, ...) come from the `leasecron.testing.pytest_plugin` plugin, which the
package registers; see its module docstring. Keep this file small."""
