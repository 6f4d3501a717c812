"""`leasecron cluster`: a throwaway local control plane for people and scripts.

    leasecron cluster run [--crds] [--keep-on-failure] -- COMMAND [ARGS...]
    leasecron cluster up [--crds]

`run` starts a cluster, runs COMMAND with `KUBECONFIG` set and the control-plane binaries
first on `PATH` (so `kubectl` and `helm` are the cached ones), tears the cluster down and
exits with COMMAND's exit code. `up` starts one, prints `export KUBECONFIG=...` and keeps it
until Ctrl-C or SIGTERM. Progress goes to stderr; stdout carries only COMMAND's output (or
the export lines). Owns the command line only; the cluster itself is
`leasecron.testing.ControlPlane`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from leasecron import _logs

if TYPE_CHECKING:
    from leasecron.testing.controlplane import ControlPlane

_COMMAND_GRACE_SECONDS = 10.0


@click.group("cluster")
def cluster() -> None:
    """A throwaway local Kubernetes control plane (etcd, kube-apiserver, controller-manager)."""


@contextmanager
def _started(*, crds: bool, keep_workdir: bool = False) -> Iterator[ControlPlane]:
    """A started ControlPlane, its failures turned into a clean CLI error."""
    from leasecron.testing import ControlPlane, ControlPlaneError, apply_leasecron_crds

    _logs.configure(json=not sys.stderr.isatty())  # people get colours, pipes get JSON
    plane = ControlPlane(keep_workdir=keep_workdir)
    try:
        plane.start()
    except ControlPlaneError as error:
        raise click.ClickException(str(error)) from error
    try:
        if crds:
            with plane.api_client() as api:
                names = apply_leasecron_crds(api)
            click.echo(f"installed CRDs: {', '.join(names)}", err=True)
        yield plane
    except ControlPlaneError as error:
        raise click.ClickException(str(error)) from error
    finally:
        plane.stop()


def _environment(plane: ControlPlane) -> dict[str, str]:
    env = dict(os.environ)
    env["KUBECONFIG"] = str(plane.kubeconfig)
    dirs = [str(d) for d in plane.assets.path_dirs]
    env["PATH"] = os.pathsep.join([*dirs, env.get("PATH", "")])
    return env


def _run_command(argv: list[str], *, env: dict[str, str]) -> int:
    """Run COMMAND to completion; on Ctrl-C give it a grace period (it got the SIGINT too)."""
    from leasecron.testing._processes import REAPER

    try:
        child = subprocess.Popen(argv, env=env)
    except OSError as error:
        raise click.ClickException(f"cannot run {argv[0]}: {error.strerror}") from error
    token = REAPER.register(child.terminate)  # SIGTERM to us: pass it on, then clean up
    try:
        return child.wait()
    except KeyboardInterrupt:
        try:
            return child.wait(timeout=_COMMAND_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            child.kill()
            return child.wait()
    finally:
        REAPER.unregister(token)


@cluster.command(
    "run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
@click.option("--crds", is_flag=True, help="Install leasecron's CRDs before running COMMAND.")
@click.option(
    "--keep-on-failure",
    is_flag=True,
    help="When COMMAND fails, keep the cluster's directory (logs, kubeconfig) and print it.",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(crds: bool, keep_on_failure: bool, command: tuple[str, ...]) -> None:
    """Run COMMAND against a throwaway cluster and exit with its exit code."""
    with _started(crds=crds) as plane:
        code = _run_command(list(command), env=_environment(plane))
        if code != 0 and keep_on_failure:
            plane.keep_workdir = True
            click.echo(f"COMMAND exited {code}; cluster files kept in {plane.workdir}", err=True)
    sys.exit(code if code >= 0 else 128 - code)  # killed by signal N: exit 128+N, as shells do


@cluster.command("up")
@click.option("--crds", is_flag=True, help="Install leasecron's CRDs.")
def up(crds: bool) -> None:
    """Start a cluster, print how to use it, and keep it until Ctrl-C."""
    _stop_on_ctrl_c()
    with _started(crds=crds) as plane:
        # Ctrl-C may come the moment the first line is out: from here on it means "stop".
        try:
            dirs = os.pathsep.join(str(d) for d in plane.assets.path_dirs)
            click.echo(f"export KUBECONFIG={plane.kubeconfig}")
            click.echo(f"export PATH={dirs}{os.pathsep}$PATH")
            sys.stdout.flush()
            click.echo(
                f"control plane {plane.version} at {plane.server} "
                f"(started in {plane.startup_seconds:.1f}s, logs in {plane.workdir / 'logs'}); "
                "Ctrl-C to stop",
                err=True,
            )
            _wait_forever()
        except KeyboardInterrupt:
            click.echo("stopping", err=True)


def _stop_on_ctrl_c() -> None:
    """Make SIGINT raise KeyboardInterrupt in the main thread.

    A shell starts background commands with SIGINT ignored, and Python then keeps it ignored;
    Ctrl-C (or `kill -INT`) is this command's documented way to stop, so restore it."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _wait_forever() -> None:
    """Block until a signal interrupts us (SIGINT raises KeyboardInterrupt here)."""
    if threading.current_thread() is threading.main_thread():
        while True:
            signal.pause()
    threading.Event().wait()
