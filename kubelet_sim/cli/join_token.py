"""`kubelet-sim join-token`: what `kubeadm token create` gives a kubelet, for nodes to join with
`--bootstrap-kubeconfig` (TLS bootstrap) instead of credentials made beforehand."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer

from kubelet_sim.cli.common import (
    ContextOption,
    KubeconfigOption,
    fail,
    log_as_tool,
    typer_app,
)
from kubelet_sim.kube.client import KubeConfigError, connect
from kubelet_sim.kube.rest import ApiError
from kubelet_sim.server.settings import parse_duration

join_token_app = typer_app()


@join_token_app.command(
    help="Create a bootstrap token (its Secret in kube-system, and kubeadm's bindings that let"
    " its holders ask for node client certificates, approved by the controller-manager) and"
    " write a kubeconfig with it, for `kubelet-sim --bootstrap-kubeconfig`."
)
def join_token(
    output: Annotated[Path, typer.Option("--output", "-o", help="The kubeconfig to write.")],
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    ttl: Annotated[str, typer.Option(help="How long the token is valid (a Go duration).")] = "24h",
) -> None:
    log_as_tool()  # warnings to stderr: stdout is the one line below
    try:
        seconds = parse_duration(ttl)
    except ValueError as exc:
        fail(f"--ttl: {exc}")
    try:
        admin = connect(kubeconfig, context)
    except KubeConfigError as exc:
        fail(str(exc))
    from kubelet_sim.localcluster.join_token import create_join_token  # noqa: PLC0415 (cryptography)

    try:
        token = create_join_token(admin, output, timedelta(seconds=seconds))
    except (ApiError, OSError) as exc:
        fail(f"cannot create a bootstrap token: {exc}")
    finally:
        admin.api.close()  # type: ignore[no-untyped-call]
    typer.echo(f"bootstrap token {token.split('.')[0]} (valid {ttl}): {output}")
