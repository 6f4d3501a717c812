"""`leasecron_scheduler`: the Scheduler as its own process."""
