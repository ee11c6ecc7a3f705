"""The walflow page of Airflow's UI and the status route it reads, served by Airflow's API server.

:data:`app` is a FastAPI application that :class:`walflow.airflow.plugin.WalflowPlugin` mounts at ``/walflow`` (no
second server); the plugin's external view puts the page in Airflow's navigation. Airflow's own login protects
both: every request needs the user Airflow's auth manager resolves from the UI's session cookie or a bearer token,
and a user sees only the connectors whose stream DAG they may read.

``GET /walflow/api/status`` is what ``walflow status --json`` prints without a connector (every connector at a glance,
:func:`walflow.airflow.status.overview`), ``GET /walflow/api/status/<connector>`` what it prints for one (with its
batches of the last :data:`HISTORY_HOURS` hours and its lake). The pages (``/walflow/``, ``/walflow/connectors/<name>``)
are one static file that fetches those routes and renders them in the browser.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.security import HTTPAuthorizationCredentials

from walflow.config.files import load_each
from walflow.errors import ConfigError
from walflow.resources import package_text

#: the hours of batches a connector's page plots
HISTORY_HOURS = 24.0

app = FastAPI(
    title="walflow",
    description="walflow's connectors: their slots, batches, snapshots and lake tables",
    docs_url=None,
    redoc_url=None,
    openapi_url=None,
)


async def _signed_in(request: Request) -> Any:
    """The signed-in user, as Airflow's own routes resolve it (a bearer token first, else the UI's session cookie;
    401 without either). Airflow's API server is imported here, when it serves a request: the plugin that holds
    :data:`app` is loaded by the scheduler and workers too."""
    from airflow.api_fastapi.core_api.security import get_user

    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    credentials = HTTPAuthorizationCredentials(scheme=scheme, credentials=token.strip()) if token.strip() else None
    return await get_user(request, None, credentials)


def _may_read(user: Any, connector: str) -> bool:
    """Whether Airflow's auth manager lets ``user`` read the connector's stream DAG."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    return bool(
        get_auth_manager().is_authorized_dag(method="GET", details=DagDetails(id=f"{connector}__stream"), user=user)
    )


@app.get("/api/status")
def all_connectors(user: Annotated[Any, Depends(_signed_in)]) -> dict[str, Any]:
    """Every connector the user may read, at a glance (``walflow status --json``)."""
    from walflow.airflow.status import overview

    return overview(dags=True, only=lambda name: _may_read(user, name))


@app.get("/api/status/{connector}")
def one_connector(connector: str, user: Annotated[Any, Depends(_signed_in)]) -> dict[str, Any]:
    """One connector (``walflow status --json --history-hours 24 <connector>``)."""
    configs, _errors = load_each()
    config = next((c for c in configs if c.name == connector), None)
    if config is None or not _may_read(user, connector):
        # the same answer for a connector that does not exist and one the user may not see
        raise HTTPException(status_code=404, detail=f"no connector named {connector!r} that you may read")
    from walflow.airflow.status import connector_status

    try:
        return connector_status(config, history_hours=HISTORY_HOURS, dags=True)
    except ConfigError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None


def _page() -> HTMLResponse:
    return HTMLResponse(
        package_text("walflow.airflow.pages", "walflow.html"),
        # the page is a frame of Airflow's UI, on the same origin; it runs only its own script and reads only walflow
        headers={
            "Content-Security-Policy": "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
            "img-src 'self' data:; frame-ancestors 'self'",
            "X-Content-Type-Options": "nosniff",
        },
    )


async def _page_for(request: Request) -> Response:
    """The page for a signed-in user; anyone else is sent to Airflow's login page, and back here after it."""
    try:
        await _signed_in(request)
    except HTTPException as exc:
        if exc.status_code not in (401, 403):
            raise
        from airflow.api_fastapi.app import get_auth_manager

        return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), status_code=303)
    return _page()


@app.get("/", response_class=HTMLResponse)
async def overview_page(request: Request) -> Response:
    return await _page_for(request)


@app.get("/connectors/{connector}", response_class=HTMLResponse)
async def connector_page(connector: str, request: Request) -> Response:
    return await _page_for(request)
