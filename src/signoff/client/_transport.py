"""Running operations over HTTP: authentication, retries with backoff, problem → exception."""

from __future__ import annotations

import asyncio
import random
import time
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

import httpx

from signoff.client._errors import ApiError, ConnectionFailed, InvalidArgument, error_from_response
from signoff.client._ops import Call, Op, Pause

T = TypeVar("T")

#: Answers worth the same request again (the server did not act, or may not have).
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
#: Never wait longer than this for one retry, whatever Retry-After says.
MAX_RETRY_DELAY = 30.0

try:
    from importlib.metadata import version as _version

    USER_AGENT = f"signoff-python/{_version('signoff')}"
except Exception:  # pragma: no cover - not installed as a distribution
    USER_AGENT = "signoff-python"


def _headers(api_key: str, extra: dict[str, str] | None) -> dict[str, str]:
    if not isinstance(api_key, str) or not api_key.strip():
        raise InvalidArgument("api_key must be a Signoff API key, not empty", field="api_key")
    return {"Authorization": f"Bearer {api_key}", "User-Agent": USER_AGENT, **(extra or {})}


class _Policy:
    def __init__(self, *, timeout: float, retries: int, backoff: float) -> None:
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff

    def attempts(self, call: Call) -> int:
        return self.retries + 1 if call.retry else 1

    def delay(self, attempt: int, response: httpx.Response | None) -> float:
        if response is not None and "retry-after" in response.headers:
            value = response.headers["retry-after"]
            try:
                seconds = float(value)
            except ValueError:
                try:
                    seconds = parsedate_to_datetime(value).timestamp() - time.time()
                except (TypeError, ValueError):
                    seconds = self.backoff
            return min(MAX_RETRY_DELAY, max(0.0, seconds))
        base: float = self.backoff * (2**attempt)
        return min(MAX_RETRY_DELAY, base * (0.5 + random.random() / 2))  # noqa: S311

    def request_kwargs(self, call: Call) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"params": call.params, "headers": call.headers}
        if call.has_body:
            kwargs["json"] = call.json
        if call.hold:
            kwargs["timeout"] = httpx.Timeout(self.timeout + call.hold)
        return kwargs


def _raise_for(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        body: Any = response.json()
    except ValueError:
        body = {"message": response.text[:500]}
    raise error_from_response(response.status_code, body)


def _safe_to_retry(call: Call, error: httpx.TransportError) -> bool:
    # A connection that never opened sent nothing: any request may go again.
    return call.retry or isinstance(error, httpx.ConnectError)


class SyncRunner:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float,
        retries: int,
        backoff: float,
        transport: httpx.BaseTransport | None,
        headers: dict[str, str] | None,
    ) -> None:
        self.policy = _Policy(timeout=timeout, retries=retries, backoff=backoff)
        self.http = httpx.Client(
            base_url=base_url,
            headers=_headers(api_key, headers),
            timeout=timeout,
            transport=transport,
        )

    def send(self, call: Call) -> httpx.Response:
        attempts, attempt = self.policy.attempts(call), 0
        while True:
            try:
                response = self.http.request(
                    call.method, call.path, **self.policy.request_kwargs(call)
                )
            except httpx.TransportError as error:
                attempt += 1
                if attempt >= (self.policy.retries + 1 if _safe_to_retry(call, error) else 1):
                    raise ConnectionFailed(f"{call.method} {call.path}: {error!r}") from error
                time.sleep(self.policy.delay(attempt - 1, None))
                continue
            attempt += 1
            if response.status_code in RETRY_STATUSES and attempt < attempts:
                time.sleep(self.policy.delay(attempt - 1, response))
                continue
            _raise_for(response)
            return response

    def run(self, op: Op[T]) -> T:
        try:
            step = next(op)
            while True:
                if isinstance(step, Pause):
                    time.sleep(step.seconds)
                    step = op.send(None)
                    continue
                try:
                    response = self.send(step)
                except (ApiError, ConnectionFailed) as error:
                    step = op.throw(error)
                else:
                    step = op.send(response)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    def close(self) -> None:
        self.http.close()


class AsyncRunner:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float,
        retries: int,
        backoff: float,
        transport: httpx.AsyncBaseTransport | None,
        headers: dict[str, str] | None,
    ) -> None:
        self.policy = _Policy(timeout=timeout, retries=retries, backoff=backoff)
        self.http = httpx.AsyncClient(
            base_url=base_url,
            headers=_headers(api_key, headers),
            timeout=timeout,
            transport=transport,
        )

    async def send(self, call: Call) -> httpx.Response:
        attempts, attempt = self.policy.attempts(call), 0
        while True:
            try:
                response = await self.http.request(
                    call.method, call.path, **self.policy.request_kwargs(call)
                )
            except httpx.TransportError as error:
                attempt += 1
                if attempt >= (self.policy.retries + 1 if _safe_to_retry(call, error) else 1):
                    raise ConnectionFailed(f"{call.method} {call.path}: {error!r}") from error
                await asyncio.sleep(self.policy.delay(attempt - 1, None))
                continue
            attempt += 1
            if response.status_code in RETRY_STATUSES and attempt < attempts:
                await asyncio.sleep(self.policy.delay(attempt - 1, response))
                continue
            _raise_for(response)
            return response

    async def run(self, op: Op[T]) -> T:
        try:
            step = next(op)
            while True:
                if isinstance(step, Pause):
                    await asyncio.sleep(step.seconds)
                    step = op.send(None)
                    continue
                try:
                    response = await self.send(step)
                except (ApiError, ConnectionFailed) as error:
                    step = op.throw(error)
                else:
                    step = op.send(response)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    async def close(self) -> None:
        await self.http.aclose()
