"""Management commands of the leasecron Django app."""
