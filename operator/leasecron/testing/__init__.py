"""Public test helpers: a throwaway local control plane and pytest fixtures for it."""
