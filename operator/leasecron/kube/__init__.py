"""The only code that talks HTTP to the API server: client configuration, error mapping,
Lease and custom-resource I/O, and watch-fed caches."""
