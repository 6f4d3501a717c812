"""leasecron inside the schedulers and frameworks an application already runs.

Each module is imported on its own and needs the library it fits (none is imported here):

- `leasecron.integrations.apscheduler`: guard the jobs of an APScheduler 3.x or 4.x scheduler;
- `leasecron.integrations.celery`: guard Celery tasks that beat sends on every replica;
- `leasecron.integrations.loops`: the `schedule` library and plain timer loops;
- `leasecron.integrations.asgi`, `.django`, `.flask`: a Scheduler in a web application's
  lifecycle; `leasecron.integrations.workers`: one Scheduler per pod under several workers.
"""
