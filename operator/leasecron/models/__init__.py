"""Pure values and decisions: durations, schedules, specs, Lease records, claim and election
decisions. No I/O, no kopf, no Kubernetes client; everything here is testable with a fake clock."""
