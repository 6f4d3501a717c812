"""One view: what this process's Scheduler is doing."""

from django.http import HttpRequest, JsonResponse
from django.urls import path
from jobs import status


def leasecron_status(request: HttpRequest) -> JsonResponse:
    return JsonResponse(status())


urlpatterns = [path("leasecron", leasecron_status)]
