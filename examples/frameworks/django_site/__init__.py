"""A minimal Django project with a leasecron Scheduler (see settings.py)."""
