"""The kopf operator: validation, status, missed-run alarms, history, Lease lifecycle.
kopf wiring stays thin; status logic lives in plain functions."""
